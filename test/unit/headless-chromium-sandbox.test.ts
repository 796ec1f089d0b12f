import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { chromium } from 'playwright-core';
import { chromiumLaunchOptions, chromiumPath } from '../../infra/headless-chromium.ts';
import { UNPRIVILEGED_ID } from '../helpers/unprivileged-user.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/** Renderer processes of Chromium's that run now: their pid and /proc status. */
function renderers(): { pid: number; status: string }[] {
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .flatMap((d) => {
      try {
        // Chromium rewrites its processes' titles: one string with the flags, not separate arguments.
        if (!fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('--type=renderer')) return [];
        return [{ pid: Number(d), status: fs.readFileSync(`/proc/${d}/status`, 'utf8') }];
      } catch {
        return [];
      }
    });
}

test('third review, finding 15: Chromium runs without its sandbox only as root', () => {
  assert.equal(chromiumLaunchOptions(0).chromiumSandbox, false, 'as root Chromium refuses to start with its sandbox');
  assert.equal(chromiumLaunchOptions(1000).chromiumSandbox, true, 'Playwright turns it off unless asked');
  assert.ok(!chromiumLaunchOptions(1000).args.includes('--no-sandbox'));
});

test(
  'third review, finding 15: as an ordinary user the flags start a sandboxed renderer',
  { skip: !fs.existsSync(chromiumPath) && `no Chromium at ${chromiumPath}`, timeout: 120_000 },
  async () => {
    // Root here: a wrapper drops to nobody before Chromium starts, as an operator's unprivileged account would be.
    const dir = testTempDir('tbt-chromium-');
    const wrapper = path.join(dir, 'chromium-as-nobody');
    const id = String(UNPRIVILEGED_ID);
    fs.writeFileSync(
      wrapper,
      [
        '#!/bin/sh',
        'for a in "$@"; do case "$a" in --user-data-dir=*) d="${a#--user-data-dir=}"; chown -R ' +
          `${id}:${id} "$d";; esac; done`,
        'export HOME="$d"',
        `exec setpriv --reuid=${id} --regid=${id} --clear-groups --inh-caps=-all ${chromiumPath} "$@"`,
      ].join('\n'),
      { mode: 0o700 },
    );
    const uid = process.getuid?.() === 0 ? UNPRIVILEGED_ID : process.getuid?.();
    const browser = await chromium.launch({
      executablePath: process.getuid?.() === 0 ? wrapper : chromiumPath,
      ...chromiumLaunchOptions(uid),
    });
    try {
      const page = await browser.newPage();
      await page.setContent('<h1>sandboxed</h1>');
      assert.equal(await page.textContent('h1'), 'sandboxed');
      const found = renderers();
      assert.ok(found.length > 0, 'no renderer process found');
      for (const r of found) {
        // Seccomp 2: a seccomp-bpf filter, which Chromium's sandbox installs in every renderer.
        assert.match(r.status, /^Seccomp:\s+2$/m, `renderer ${r.pid} runs without a seccomp filter`);
        assert.match(r.status, new RegExp(`^Uid:\\s+${uid}\\b`, 'm'), `renderer ${r.pid} runs as another user`);
      }
    } finally {
      await browser.close();
    }
  },
);
