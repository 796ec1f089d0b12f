import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { readDeclaredRequirements, urlProblem } from '../../datasets/thinkingbox/requirement-specs.ts';
import { parsePipConfigList, sandboxIndexConfig } from '../../datasets/thinkingbox/pip-index-config.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const work = testTempDir('tbt-requirement-specs-');
const wheelsOnly = { allowUrls: false, allowSourceUrls: false };

/** A server package declaring `dependencies`; returns its folder and pyproject.toml. */
function pkg(name: string, dependencies: string[]): { dir: string; file: string } {
  const dir = path.join(work, name);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'pyproject.toml');
  const lines = dependencies.map((d) => `  ${JSON.stringify(d)},`).join('\n');
  fs.writeFileSync(file, `[project]\nname = "${name}"\ndependencies = [\n${lines}\n]\n`);
  return { dir, file };
}

const refusal = (dependencies: string[], policy = wheelsOnly) => {
  const { dir, file } = pkg(`p${Math.random().toString(36).slice(2)}`, dependencies);
  try {
    readDeclaredRequirements([dir], policy);
  } catch (err) {
    return { message: (err as Error).message, file };
  }
  return { message: '', file };
};

test('second review, finding 3: PEP 508 requirements pass in canonical form, deduplicated', () => {
  const { dir, file } = pkg('good', [
    'mcp',
    'fastmcp>=3,<4',
    'pydantic[email] >= 2',
    'pywin32; sys_platform == "win32"',
    'mcp',
  ]);
  const found = readDeclaredRequirements([dir], wheelsOnly);
  assert.deepEqual(
    found.map((r) => r.requirement),
    ['fastmcp<4,>=3', 'mcp', 'pydantic[email]>=2', 'pywin32; sys_platform == "win32"'],
  );
  assert.deepEqual(
    found.map((r) => [r.name, r.line]),
    [
      ['fastmcp', 5],
      ['mcp', 4],
      ['pydantic', 6],
      ['pywin32', 7],
    ],
  );
  assert.ok(found.every((r) => r.file === file));
});

test('second review, finding 3: pip options, paths and bad syntax are refused with file and line', () => {
  for (const [spec, line] of [
    ['--index-url=https://evil.example/simple', 5],
    ['-e .', 5],
    ['./local_package', 5],
    ['/etc', 5],
    ['mcp >= ', 5],
    ['mcp; os.system("x")', 5],
  ] as const) {
    const { message, file } = refusal(['mcp', spec]);
    const expected = `${file}:${line}: project.dependencies: ${JSON.stringify(spec)} is not a PEP 508`;
    assert.ok(message.startsWith(expected), message);
  }
  const { message, file } = refusal([]);
  assert.equal(message, '', file);
});

test('second review, finding 3: URLs only with --allow-urls, https, no credentials, no sdist unless allowed', () => {
  const wheel = 'x @ https://files.example/x-1.0-py3-none-any.whl';
  assert.match(refusal([wheel]).message, /:4: .* names a URL .*--allow-urls/);
  const urls = { allowUrls: true, allowSourceUrls: false };
  assert.equal(refusal([wheel], urls).message, '');
  assert.match(refusal(['x @ https://files.example/x-1.0.tar.gz'], urls).message, /not a wheel .*--allow-sdist/);
  assert.equal(refusal(['x @ https://files.example/x-1.0.tar.gz'], { ...urls, allowSourceUrls: true }).message, '');
  assert.match(urlProblem('file:///etc/passwd', urls)!, /file: URL; only https/);
  assert.match(urlProblem('git+https://github.com/a/b', urls)!, /git\+https: URL/);
  assert.match(urlProblem('https://u:p@files.example/x.whl', urls)!, /credentials/);
});

test("second review, finding 3: the sandbox gets the operator's index settings, local folders and index hosts", () => {
  const settings = parsePipConfigList(
    [
      ":env:.find-links='/opt/wheels-env'",
      "global.find-links='/opt/wheels'",
      "global.extra-index-url='file:///opt/pypi/simple https://mirror.example:8443/simple'",
      "global.constraint='/etc/xdg/pip/constraints.txt'",
      "global.proxy='http://proxy.example:3128'",
    ].join('\n'),
  );
  assert.equal(settings.get('find-links'), '/opt/wheels-env', 'the environment wins over a config file');
  const config = sandboxIndexConfig(settings);
  assert.equal(config.env.PIP_INDEX_URL, 'https://pypi.org/simple');
  assert.equal(config.env.PIP_EXTRA_INDEX_URL, 'file:///opt/pypi/simple https://mirror.example:8443/simple');
  assert.equal(config.env.PIP_PROXY, undefined, 'only index settings are carried');
  assert.deepEqual(config.hosts.sort(), ['files.pythonhosted.org:443', 'mirror.example:8443', 'pypi.org:443']);
  assert.throws(
    () => sandboxIndexConfig(new Map([['index-url', 'https://user:token@private.example/simple']])),
    /credentials cannot be given to the sandboxed install/,
  );
});
