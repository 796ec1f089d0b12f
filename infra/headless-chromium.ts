import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { readEnvironment } from '../config/environment.ts';

/** Debian's Chromium, headless, with the flags that keep it off the (closed) network (PLATFORM.md). */
export const chromiumPath = readEnvironment().TBT_CHROMIUM;

export async function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(chromiumPath))
    throw new Error(
      `Chromium not found at ${chromiumPath}: run \`bash scripts/install-chromium.sh\` (or set TBT_CHROMIUM)`,
    );
  return chromium.launch({
    executablePath: chromiumPath,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
    ],
  });
}
