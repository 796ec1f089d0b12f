import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import { report } from '../cli/commands/report.ts';
import { chromiumLaunchOptions } from '../infra/headless-chromium.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const fixture = (name: string) => path.join(root, 'test', 'fixtures', 'report', name);
const CHROMIUM = '/usr/bin/chromium';
const SCREENSHOT = path.join(root, '.state', 'report-screenshot.png');

test(
  'the report renders in headless Chromium: every plot has a size, nothing but file:// is requested',
  { timeout: 120_000 },
  async (t) => {
    if (!fs.existsSync(CHROMIUM)) {
      assert.fail(
        `${CHROMIUM} is missing: this check needs Debian's chromium; run scripts/install-chromium.sh (as root) and ` +
          `try again`,
      );
    }
    const outDir = path.join(root, '.state', 'report-browser');
    fs.rmSync(outDir, { recursive: true, force: true });
    const lines: string[] = [];
    const code = await report(
      [
        '--out',
        outDir,
        '--campaign',
        'fixture-campaign',
        '--probe',
        fixture('probe-aggregates.jsonl'),
        '--steps',
        fixture('steps.jsonl'),
        '--before',
        fixture('eval-before.json'),
        '--after',
        fixture('eval-after.json'),
        '--costs',
        fixture('costs.json'),
      ],
      { out: (s) => lines.push(s), err: (s) => lines.push(s) },
    );
    assert.equal(code, 0, lines.join('\n'));
    const html = path.join(outDir, 'index.html');
    const expectedSvgs = (fs.readFileSync(html, 'utf8').match(/<svg\b/g) ?? []).length;
    assert.ok(expectedSvgs >= 8, `expected at least 8 plots, found ${expectedSvgs}`);

    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      ...chromiumLaunchOptions(),
    });
    try {
      const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
      const requests: string[] = [];
      const consoleErrors: string[] = [];
      page.on('request', (r) => requests.push(r.url()));
      page.on('console', (m) => {
        if (m.type() === 'error') consoleErrors.push(m.text());
      });
      page.on('pageerror', (e) => consoleErrors.push(e.message));
      await page.goto(pathToFileURL(html).href, { waitUntil: 'load' });

      const svgs = await page.$$('svg');
      assert.equal(svgs.length, expectedSvgs, 'every <svg> of the file is in the page');
      for (const [i, svg] of svgs.entries()) {
        const label = await svg.getAttribute('aria-label');
        const box = await svg.boundingBox();
        assert.ok(
          box && box.width > 0 && box.height > 0,
          `svg ${i} (${label}) has no visible size: ${JSON.stringify(box)}`,
        );
      }
      const summaryText = await page.locator('#summary').innerText();
      assert.match(summaryText, /pass@1 \(after\)\s+70\.00%/);

      const foreign = requests.filter((u) => !u.startsWith('file://'));
      assert.deepEqual(foreign, [], `requests other than file://: ${foreign.join(', ')}`);
      assert.deepEqual(consoleErrors, [], 'no console errors (a blocked fetch would show up here)');

      fs.mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      assert.ok(fs.statSync(SCREENSHOT).size > 10_000, 'the screenshot holds an image');
      t.diagnostic(`screenshot: ${SCREENSHOT}`);
      console.log(`report screenshot: ${SCREENSHOT}`);
    } finally {
      await browser.close();
    }
  },
);
