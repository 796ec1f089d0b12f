/**
 * Where a secret (an API key, a weight-sync token) may be sent: an origin, i.e. scheme, host and port. A host
 * name alone is not enough: a key meant for `https://host` must not go in clear text to `http://host:8080`,
 * which may be another program on that machine.
 *
 * Written `https://host[:port]`, `http://host[:port]` (default ports 443 and 80), or a bare `host[:port]`,
 * which means https (so `api.example.com` is `https://api.example.com:443`). Port `*` (any port) is used by the
 * built-in loopback ties only.
 */

export interface EndpointOrigin {
  scheme: 'http' | 'https';
  /** Lower case; IPv6 in brackets (`[::1]`), as URL.hostname writes it. */
  host: string;
  port: number | '*';
}

const defaultPorts = { http: 80, https: 443 } as const;

/** The origin a spec names, or undefined when it is not one (a path, user info or another scheme). */
export function parseOrigin(spec: string): EndpointOrigin | undefined {
  const text = spec.trim();
  const explicit = /^(https?):\/\//i.exec(text);
  const anyPort = /:\*$/.test(text);
  const withScheme = explicit ? text : `https://${text}`;
  let url: URL;
  try {
    url = new URL(anyPort ? withScheme.slice(0, -2) : withScheme);
  } catch {
    return undefined;
  }
  const rest = explicit ? text.slice(explicit[0].length) : text;
  if (!rest || /[/?#@]/.test(rest) || !url.hostname) return undefined;
  const scheme = url.protocol === 'http:' ? 'http' : 'https';
  return { scheme, host: url.hostname.toLowerCase(), port: anyPort ? '*' : Number(url.port || defaultPorts[scheme]) };
}

/** The origin of a URL (its port made explicit), or undefined for a URL that is not http(s). */
export function originOfUrl(url: string): EndpointOrigin | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return undefined;
  const scheme = parsed.protocol === 'http:' ? 'http' : 'https';
  return { scheme, host: parsed.hostname.toLowerCase(), port: Number(parsed.port || defaultPorts[scheme]) };
}

/** Whether `url` is at one of `origins` (same scheme, host and port, or any port where the tie says `*`). */
export function urlMatchesOrigin(url: string, origins: readonly EndpointOrigin[]): boolean {
  const at = originOfUrl(url);
  return (
    at !== undefined &&
    origins.some((o) => o.scheme === at.scheme && o.host === at.host && (o.port === '*' || o.port === at.port))
  );
}

export function formatOrigin(origin: EndpointOrigin): string {
  return `${origin.scheme}://${origin.host}:${origin.port}`;
}

/** Loopback on any port, over http or https: requests there never leave this machine. */
export const loopbackOrigins: readonly EndpointOrigin[] = ['localhost', '127.0.0.1', '[::1]'].flatMap((host) =>
  (['http', 'https'] as const).map((scheme) => ({ scheme, host, port: '*' as const })),
);
