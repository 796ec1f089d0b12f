import { escapeXml as escape } from './svg-charts.ts';

/**
 * The opening of every static page we write (the report, an episode's page) up to `<body>`: no scripts, no
 * network (the Content-Security-Policy allows inline styles only), the page's own CSS inline.
 */
export function htmlPageHead(title: string, css: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>${escape(title)}</title>
<style>${css}</style>
</head>
<body>`;
}
