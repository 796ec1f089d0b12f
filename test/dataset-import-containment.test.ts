import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { importThinkingbox } from '../cli/commands/tasks.ts';
import { repoRoot } from '../config/environment.ts';
import { formatProblem } from '../config/yaml-file.ts';
import { importThinkingboxDataset, type ImportResult } from '../datasets/thinkingbox/dataset-importer.ts';
import { isInside, unchangedPath } from '../datasets/thinkingbox/dataset-paths.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Hostile ThinkingBox-format datasets (the fixture, copied and changed) imported: every path the dataset names
 * must resolve, links followed, inside the dataset folder (servers.yaml's inside the servers folder); names
 * that change how programs load are refused in servers.yaml `env`; a YAML alias bomb in a test file is a
 * problem, not a hang. Each refusal names the file, the field and the line. No servers are needed.
 */

const fixture = path.join(repoRoot, 'examples', 'thinkingbox-fixture');
const work = testTempDir('tbt-hostile-import-');

interface HostileCopy {
  /** The distribution: dataset/, servers/, releases/. */
  root: string;
  data: string;
  servers: string;
  serversFile: string;
  list: string;
  /** A folder beside the distribution: the host's files, as far as the dataset is concerned. */
  outside: string;
}

function hostileCopy(name: string): HostileCopy {
  const root = path.join(work, name, 'bench');
  fs.cpSync(fixture, root, { recursive: true });
  const outside = path.join(work, name, 'outside');
  fs.mkdirSync(outside);
  return {
    root,
    data: path.join(root, 'dataset'),
    servers: path.join(root, 'servers'),
    serversFile: path.join(root, 'servers', 'servers.yaml'),
    list: path.join(root, 'releases', 'fixture_v1', 'testlist_fixture_v1.yaml'),
    outside,
  };
}

const importCopy = (c: HostileCopy): ImportResult => importThinkingboxDataset({ dataDir: c.data, listFile: c.list });
const problemLines = (r: ImportResult) => r.problems.map(formatProblem).join('\n');
const appendToList = (c: HostileCopy, ...entries: string[]) =>
  fs.appendFileSync(c.list, entries.map((e) => `- ${e}\n`).join(''));
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** Every path the suite hands to the sandbox or to a reader lies inside `root`. */
function assertSuitePathsInside(result: ImportResult, roots: string[]): void {
  const inside = (p: string) => roots.some((r) => isInside(p, r));
  for (const [name, spec] of Object.entries(result.suite.servers))
    if (spec.transport === 'stdio') assert.ok(inside(spec.cwd), `server ${name}: cwd ${spec.cwd} is outside`);
  for (const t of result.suite.tasks) assert.ok(inside(t.test.file), `task ${t.uid}: ${t.test.file} is outside`);
  for (const p of result.suite.server_packages) assert.ok(inside(p), `server package ${p} is outside`);
}

const secretTest = (marker: string) =>
  `"""!\nscenario: circulation_desk\n"""\n\n\ndef test_leak(x):\n    """!\n    query: ${marker}\n    """\n`;

test('second review, finding 2: a servers.yaml cwd outside its folder (cwd: /, a link to /etc) is refused', () => {
  const c = hostileCopy('cwd');
  fs.symlinkSync('/etc', path.join(c.servers, 'etc'));
  fs.writeFileSync(
    c.serversFile,
    [
      'servers:',
      '  catalog:',
      '    type: mcp-process',
      '    command: ["{python}", "-m", "library_servers.catalog_server"]',
      '    cwd: etc',
      '  loans:',
      '    type: mcp-process',
      '    command: ["{python}", "-m", "library_servers.loans_server"]',
      '    cwd: /',
      '  inside:',
      '    type: mcp-process',
      '    command: ["{python}", "-m", "library_servers.loans_server"]',
      '    cwd: library_servers/../library_servers',
      '',
    ].join('\n'),
  );
  const result = importCopy(c);
  assertSuitePathsInside(result, [c.servers, c.data]);
  const lines = problemLines(result);
  assert.match(
    lines,
    new RegExp(`^${escape(c.serversFile)}:9: servers\\.loans\\.cwd: '/' resolves to /, outside`, 'm'),
  );
  assert.match(
    lines,
    new RegExp(`^${escape(c.serversFile)}:5: servers\\.catalog\\.cwd: 'etc' resolves to /etc, outside`, 'm'),
  );
  assert.doesNotMatch(lines, /servers\.inside\.cwd/, 'a cwd inside the servers folder is fine');
  assert.match(lines, new RegExp(`^${escape(path.join(c.servers, 'etc'))}:1: symbolic link to /etc, outside`, 'm'));
  assert.equal(result.suite.tasks.length, 0, 'every fixture task needs loans or catalog, both left out');

  // The command line says the same and exits 1.
  const io = { out: [] as string[], err: [] as string[] };
  const code = importThinkingbox(['--data', c.data, '--list', c.list, '--out', path.join(work, 'cwd', 'imported')], {
    out: (s: string) => io.out.push(s),
    err: (s: string) => io.err.push(s),
  });
  assert.equal(code, 1);
  assert.match(io.err.join('\n'), /servers\.loans\.cwd: '\/' resolves to \/, outside/);
});

test("second review, finding 2: list entries with '..' and test files linked outside the dataset are refused", () => {
  const c = hostileCopy('list');
  fs.writeFileSync(path.join(c.outside, 'secret.py'), secretTest('HOST-SECRET-DOTDOT'));
  fs.writeFileSync(path.join(c.outside, 'linked.py'), secretTest('HOST-SECRET-LINK'));
  fs.symlinkSync(path.join(c.outside, 'linked.py'), path.join(c.data, 'test_case', 'linked.py'));
  fs.symlinkSync('/etc', path.join(c.data, 'test_case', 'etc'));
  const listed = fs.readFileSync(c.list, 'utf8').match(/^- /gm)!.length;
  appendToList(c, '../../../outside/secret.py:test_leak', 'linked.py:test_leak', 'etc/passwd.py:test_x');
  const result = importCopy(c);
  assertSuitePathsInside(result, [c.data, c.servers]);
  assert.doesNotMatch(JSON.stringify(result.suite), /HOST-SECRET/);
  const lines = problemLines(result);
  const at = (n: number, uid: string, resolved: string) =>
    assert.match(
      lines,
      new RegExp(
        `^${escape(c.list)}:${n}: \\[${n - 2}\\]: ${escape(uid)}: the test file .* resolves to ` +
          `${escape(resolved)}, outside the dataset folder`,
        'm',
      ),
    );
  // The list starts with a comment line, so entry i is on line i + 2.
  at(listed + 2, '../../../outside/secret.py:test_leak', path.join(c.outside, 'secret.py'));
  at(listed + 3, 'linked.py:test_leak', path.join(c.outside, 'linked.py'));
  at(listed + 4, 'etc/passwd.py:test_x', '/etc/passwd.py');
  assert.equal(result.suite.tasks.length, listed, 'the fixture tasks still import');
});

test('second review, finding 2: agent, scenario and meta files linked outside the dataset are not read', () => {
  const c = hostileCopy('files');
  const scenario = 'world_state: {loans: {}}\ntools: [{name: get_member}]\nbot_instructions: HOST-SECRET-SCENARIO\n';
  fs.writeFileSync(path.join(c.outside, 'leak.yaml'), scenario);
  fs.symlinkSync(path.join(c.outside, 'leak.yaml'), path.join(c.data, 'scenario', 'leak.yaml'));
  fs.writeFileSync(
    path.join(c.data, 'test_case', 'uses_leak.py'),
    secretTest('hi').replace('circulation_desk', 'leak'),
  );
  const meta = path.join(c.data, 'test_case', 'circulation.meta.yaml');
  fs.writeFileSync(
    path.join(c.outside, 'meta.yaml'),
    fs.readFileSync(meta, 'utf8').replace('Hello, is the desk open?', 'HOST-SECRET-META'),
  );
  fs.rmSync(meta);
  fs.symlinkSync(path.join(c.outside, 'meta.yaml'), meta);
  appendToList(c, 'uses_leak.py:test_leak');
  const result = importCopy(c);
  assert.doesNotMatch(JSON.stringify(result.suite), /HOST-SECRET/);
  const lines = problemLines(result);
  assert.match(
    lines,
    new RegExp(
      `^${escape(path.join(c.data, 'scenario', 'leak.yaml'))}:1: .* resolves to ` +
        `${escape(path.join(c.outside, 'leak.yaml'))}, outside the dataset folder`,
      'm',
    ),
  );
  assert.match(
    lines,
    new RegExp(`^${escape(meta)}:1: .* resolves to ${escape(path.join(c.outside, 'meta.yaml'))}`, 'm'),
  );

  const agentCopy = hostileCopy('agent');
  const agent = path.join(agentCopy.data, 'agent', 'default.yaml');
  fs.writeFileSync(
    path.join(agentCopy.outside, 'agent.yaml'),
    fs.readFileSync(agent, 'utf8').replace('You are a staff assistant', 'HOST-SECRET-AGENT'),
  );
  fs.rmSync(agent);
  fs.symlinkSync(path.join(agentCopy.outside, 'agent.yaml'), agent);
  const agentResult = importCopy(agentCopy);
  assert.doesNotMatch(JSON.stringify(agentResult.suite), /HOST-SECRET/);
  assert.match(problemLines(agentResult), new RegExp(`^${escape(agent)}:1: .* outside the dataset folder`, 'm'));
});

test('second review, finding 2: a folder swapped for a link after the import is refused at run time', () => {
  const c = hostileCopy('swap');
  const result = importCopy(c);
  assert.equal(result.problems.length, 0, problemLines(result));
  const cwd = (result.suite.servers.loans as { cwd: string }).cwd;
  const file = result.suite.tasks[0]!.test.file;
  assert.equal(unchangedPath(cwd, 'server loans: cwd'), cwd, 'the importer stored resolved paths');
  assert.equal(unchangedPath(file, 'test file'), file);
  fs.renameSync(c.servers, path.join(c.root, 'servers-moved'));
  fs.symlinkSync('/', c.servers);
  assert.throws(
    () => unchangedPath(cwd, 'server loans: cwd'),
    /server loans: cwd: .* now resolves to \/, not the path/,
  );
  fs.rmSync(path.dirname(file), { recursive: true });
  assert.throws(() => unchangedPath(file, 'test file'), /test file: .* does not exist/);
});

test('second review, finding 2: a link to /etc anywhere in the dataset or a server package is a problem', () => {
  const c = hostileCopy('links');
  const links = [
    path.join(c.data, 'test_case', 'stacks', 'etc'),
    path.join(c.servers, 'library_servers', 'library_servers', 'etc'),
  ];
  for (const link of links) fs.symlinkSync('/etc', link);
  const dangling = path.join(c.data, 'scenario', 'gone');
  fs.symlinkSync('/no/such/place', dangling);
  const other = path.join(c.servers, 'other_servers');
  fs.mkdirSync(other);
  fs.writeFileSync(path.join(c.outside, 'pyproject.toml'), '[project]\nname = "x"\ndependencies = []\n');
  fs.symlinkSync(path.join(c.outside, 'pyproject.toml'), path.join(other, 'pyproject.toml'));
  const result = importCopy(c);
  const lines = problemLines(result);
  for (const link of links)
    assert.match(lines, new RegExp(`^${escape(link)}:1: symbolic link to /etc, outside the dataset folder`, 'm'));
  assert.match(lines, new RegExp(`^${escape(dangling)}:1: symbolic link to /no/such/place, outside`, 'm'));
  assert.match(
    lines,
    new RegExp(
      `^${escape(path.join(other, 'pyproject.toml'))}:1: .* resolves to ` +
        `${escape(path.join(c.outside, 'pyproject.toml'))}, outside`,
      'm',
    ),
  );
  assert.deepEqual(result.suite.server_packages, [], 'neither package is handed to the sandbox');
});

test('second review, finding 1: servers.yaml env names that change how programs load are refused at import', () => {
  const c = hostileCopy('env');
  const refused = ['LD_PRELOAD', 'LD_LIBRARY_PATH', 'PATH', 'PYTHONSTARTUP', 'PYTHONHOME', 'BASH_ENV', 'NODE_OPTIONS'];
  fs.writeFileSync(
    c.serversFile,
    [
      'servers:',
      '  catalog:',
      '    type: mcp-process',
      '    command: ["{python}", "-m", "library_servers.catalog_server"]',
      '  loans:',
      '    type: mcp-process',
      '    command: ["{python}", "-m", "library_servers.loans_server"]',
      '    env:',
      '      LIBRARY_TODAY: "2025-03-11"',
      ...refused.map((name) => `      ${name}: ${path.join(c.data, 'x')}`),
      '',
    ].join('\n'),
  );
  const result = importCopy(c);
  assert.ok(!('loans' in result.suite.servers), 'the server is left out');
  const lines = problemLines(result);
  refused.forEach((name, i) =>
    assert.match(
      lines,
      new RegExp(
        `^${escape(c.serversFile)}:${10 + i}: servers\\.loans\\.env\\.${name}: ${name} changes how ` + 'programs load',
        'm',
      ),
    ),
  );
  assert.doesNotMatch(lines, /LIBRARY_TODAY/);
  assert.ok(result.suite.servers.catalog, 'a server without such names still imports');
});

test('second review, finding 7 (YAML alias bomb): a test file with an alias bomb is a problem at its line', () => {
  const c = hostileCopy('bomb');
  // Five levels of nine aliases (59,049 nodes) rather than the nine of the report, which before the fix did not
  // finish (and needed tens of GB): this one finishes either way, so the check can fail instead of hanging.
  const names = 'abcde';
  const bomb = [...names].map((n, i) =>
    i === 0
      ? `    ${n}: &${n} [${Array(9).fill('lol').join(',')}]`
      : `    ${n}: &${n} [${Array(9)
          .fill(`*${names[i - 1]}`)
          .join(',')}]`,
  );
  const file = path.join(c.data, 'test_case', 'bomb.py');
  fs.writeFileSync(
    file,
    [
      '"""!',
      'scenario: circulation_desk',
      '"""',
      '',
      '',
      'def test_bomb(x):',
      '    """!',
      '    query: hi',
      '    extra:',
      ...bomb.map((l) => `  ${l}`),
      '    """',
      '',
    ].join('\n'),
  );
  appendToList(c, 'bomb.py:test_bomb');
  const result = importCopy(c);
  assert.ok(!result.suite.tasks.some((t) => t.uid === 'bomb.py:test_bomb'), 'the task is left out');
  assert.match(problemLines(result), new RegExp(`^${escape(file)}:7: .*alias bomb`, 'm'));
});
