import path from 'node:path';
import { parseArgs } from 'node:util';
import { launchChromium } from '../../infra/headless-chromium.ts';

/**
 * Screenshot of a campaign report's summary and reward curve in headless Chromium (for docs/): checks that the
 * page renders the training reward chart, then saves the summary and the Training section as one PNG.
 *   npx tsx bench/learning/screenshot-report.ts --report .state/runs/<campaign>/report --out docs/x.png
 */
const { values } = parseArgs({ options: { report: { type: 'string' }, out: { type: 'string' } } });
if (!values.report || !values.out) throw new Error('usage: screenshot-report.ts --report DIR --out FILE.png');
const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  await page.goto(`file://${path.resolve(values.report, 'index.html')}`, { waitUntil: 'load' });
  await page.locator('#training-reward svg').waitFor({ timeout: 30_000 });
  const top = await page.locator('#summary').boundingBox();
  const end = await page.locator('#training-reward').boundingBox();
  if (!top || !end) throw new Error('the report has no summary or no reward chart');
  await page.screenshot({
    path: path.resolve(values.out),
    fullPage: true,
    clip: { x: 0, y: 0, width: 1000, height: end.y + end.height + 10 },
  });
  console.log(`screenshot: ${path.resolve(values.out)}`);
} finally {
  await browser.close();
}
