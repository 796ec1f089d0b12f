import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { readEnvironment } from '../config/environment.ts';

/** Debian's Chromium, headless, with the flags that keep it off the (closed) network (PLATFORM.md). */
export const chromiumPath = readEnvironment().TBT_CHROMIUM;

/**
 * How Chromium starts for a user id. It keeps its own sandbox (namespaces and a seccomp filter around each
 * renderer) except as root, where it refuses to start with one. Playwright turns the sandbox off unless asked
 * (`chromiumSandbox` defaults to false): it is asked for everywhere but root. Chromium renders our own pages
 * only (reports, the episode viewer, the Temporal and MLflow UIs on loopback); run the screenshot commands as an
 * unprivileged user to keep the sandbox (docs/security.md, third review, finding 15).
 */
export function chromiumLaunchOptions(uid: number | undefined = process.getuid?.()): {
  chromiumSandbox: boolean;
  args: string[];
} {
  return {
    chromiumSandbox: uid !== 0,
    args: [
      '--headless',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
    ],
  };
}

export async function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(chromiumPath))
    throw new Error(
      `Chromium not found at ${chromiumPath}: run \`bash scripts/install-chromium.sh\` (or set TBT_CHROMIUM)`,
    );
  return chromium.launch({
    executablePath: chromiumPath,
    ...chromiumLaunchOptions(),
  });
}
