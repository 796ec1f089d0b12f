import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';
import * as sandboxModule from '../../datasets/thinkingbox/dataset-sandbox.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * Third security review, finding 10 (the rule): descriptors the worker inherited without close-on-exec reached
 * dataset code, as Node does not close them on exec. Every spawn of dataset code must close them; the one way is a
 * command line from `DatasetSandbox.prepare`, which starts with the launcher `closingInheritedFds` builds.
 * test/third-review-doors.test.ts shows the real sandbox closing them.
 */

/** Spawns that start no dataset code: the host's own helpers, each with the reason it is not dataset code. */
const HOST_SPAWNS: Record<string, string> = {
  "datasets/thinkingbox/host-python.ts: 'python3'": 'our interpreter, -I, cwd / (third review, finding 1)',
  'datasets/thinkingbox/host-python.ts: options.python ?? hostPython()': 'the same',
  'datasets/thinkingbox/pip-index-config.ts: python': '`pip config list` of the venv just made, before any install',
  'datasets/thinkingbox/test-file-parser.ts: datasetPython()': 'our parser, reading test files as data',
  "datasets/thinkingbox/dataset-environment.ts: hostProgram('flock')": 'the build lock',
  'datasets/thinkingbox/index-proxy.ts: process.execPath': 'the install proxy (this file, run by Node)',
  'datasets/thinkingbox/sandbox-cgroups.ts: found.joinCommand(probe)[0]!': 'the cgroup probe, running `true`',
};

/** The first two top-level arguments of the call whose `(` is at `open` in `text`. */
function callArguments(text: string, open: number): string[] {
  const args = [''];
  let depth = 0;
  for (let i = open + 1; i < text.length && args.length <= 2; i++) {
    const ch = text[i]!;
    if ('([{'.includes(ch)) depth += 1;
    else if (')]}'.includes(ch) && depth-- === 0) break;
    else if (ch === ',' && depth === 0) {
      args.push('');
      continue;
    }
    args[args.length - 1] += ch;
  }
  return args.slice(0, 2).map((a) => a.trim());
}

/** Each child_process call in `text`: its name, line and first two arguments. */
function childProcessCalls(text: string): { line: number; name: string; program: string; rest: string }[] {
  const imported = /import\s*\{([^}]*)\}\s*from\s*['"](node:)?child_process['"]/.exec(text)?.[1];
  if (!imported) return [];
  const names = imported
    .split(',')
    .map((n) =>
      n
        .trim()
        .split(/\s+as\s+/)
        .at(-1)!,
    )
    .filter((n) => !/^type\s/.test(n));
  return [...text.matchAll(new RegExp(`\\b(${names.join('|')})\\(`, 'g'))].map((m) => {
    const [program = '', rest = ''] = callArguments(text, m.index + m[0].length - 1);
    return { line: text.slice(0, m.index).split('\n').length, name: m[1]!, program, rest };
  });
}

/** `run.command, run.args` where the file gets `run` from `.prepare(` (or `this.wrap(`), or takes it typed as a
 * SandboxedCommand: a command line from the sandbox, so through the launcher. */
function isSandboxedCommand(text: string, program: string, rest: string): boolean {
  const m = /^(\w+)\.command$/.exec(program);
  if (!m || rest !== `${m[1]}.args`) return false;
  const name = m[1]!;
  return (
    new RegExp(`\\b${name}\\s*=\\s*[^;]*?\\.(prepare|wrap)\\(`).test(text) ||
    new RegExp(`\\b${name}\\s*:\\s*[^,)=]*\\bSandboxedCommand\\b`).test(text)
  );
}

test('third review, finding 10 (the rule): dataset code is spawned only through the launcher that closes fds', () => {
  const { DatasetSandbox, closingInheritedFds } = sandboxModule as Record<string, any>;
  assert.equal(typeof closingInheritedFds, 'function', 'dataset-sandbox.ts has no launcher that closes inherited fds');
  // Every command line prepare() gives starts with the launcher (bubblewrap's is the same wrap(); shown for real in
  // test/third-review-doors.test.ts).
  const sandbox = new DatasetSandbox({
    bwrap: '/nonexistent/bwrap',
    unsandboxed: true,
    cgroups: false,
    scratchRoot: testTempDir('tbt-spawn-rule-'),
    log: () => undefined,
  });
  const run = sandbox.prepare({ command: '/bin/true', args: ['x'], label: 'rule' });
  run.dispose();
  const launcher = closingInheritedFds('/bin/true', []) as { command: string; args: string[] };
  assert.equal(run.command, launcher.command);
  assert.deepEqual(run.args.slice(0, launcher.args.length - 1), launcher.args.slice(0, -1));
  assert.deepEqual(run.args.slice(-2), ['/bin/true', 'x']);

  // Every child_process call under datasets/ (and any file elsewhere that prepares dataset code) is either a
  // prepared command line or a known host helper.
  const offenders: string[] = [];
  const seen = new Set<string>();
  const files = (fs.readdirSync(repoRoot, { recursive: true }) as string[]).filter(
    (f) =>
      f.endsWith('.ts') && !/^(node_modules|test|\.tools|\.state|\.git)\//.test(f) && !f.includes('/node_modules/'),
  );
  for (const rel of files) {
    const text = fs.readFileSync(path.join(repoRoot, rel), 'utf8');
    if (!rel.startsWith('datasets/') && !/\.prepare\(|SandboxedCommand|DatasetSandbox/.test(text)) continue;
    for (const c of childProcessCalls(text)) {
      const key = `${rel}: ${c.program}`;
      if (isSandboxedCommand(text, c.program, c.rest)) continue;
      if (key in HOST_SPAWNS) {
        seen.add(key);
        continue;
      }
      offenders.push(`${rel}:${c.line}: ${c.name}(${c.program}, ...)`);
    }
  }
  assert.deepEqual(
    offenders,
    [],
    'spawn dataset code only as a command line from DatasetSandbox.prepare (it closes inherited descriptors); ' +
      'a host helper that runs no dataset code goes into HOST_SPAWNS with its reason',
  );
  assert.deepEqual(
    Object.keys(HOST_SPAWNS).filter((k) => !seen.has(k)),
    [],
    'HOST_SPAWNS entries that match no spawn any more',
  );
});
