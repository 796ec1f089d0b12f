import path from 'node:path';
import { readEnvironment, temporalUiUrl } from '../../config/environment.ts';
import { launchChromium } from '../../infra/headless-chromium.ts';
import { uiScreenshotCommand } from '../command-definitions.ts';
import { commandLineOrExit } from '../command-line.ts';

/**
 * `tbt ui-screenshot --campaign ID --out FILE.png`: opens the Temporal UI in headless Chromium, lists
 * workflows by the search attribute TbtCampaign, checks the campaign is there, and saves a screenshot.
 */
export async function uiScreenshot(args: string[]): Promise<number> {
  const line = commandLineOrExit(uiScreenshotCommand, args);
  if (typeof line === 'number') return line;
  const { values } = line;
  const env = readEnvironment();
  const query = encodeURIComponent(`TbtCampaign="${values.campaign}"`);
  const url = `${temporalUiUrl(env)}/namespaces/${env.TBT_TEMPORAL_NAMESPACE}/workflows?query=${query}`;
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    await page.goto(url, { waitUntil: 'networkidle', timeout: 60_000 });
    // The campaign's own workflow id appears as a link in the filtered list.
    await page.getByText(values.campaign, { exact: true }).first().waitFor({ timeout: 60_000 });
    await page.screenshot({ path: path.resolve(values.out), fullPage: true });
    console.log(`found ${values.campaign} by TbtCampaign in the Temporal UI: ${url}`);
    console.log(`screenshot: ${path.resolve(values.out)}`);
    return 0;
  } finally {
    await browser.close();
  }
}
