import fs from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import { datasetServerSchema, serversFileSchema, type ServerSpec } from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, validateParsed, type TaskFileProblem } from '../../config/yaml-file.ts';
import { containedPath } from './dataset-paths.ts';

/**
 * A dataset's tool servers: servers.yaml (beside the dataset folder, in servers/, or inside it) read into
 * server specs, and the server packages kept beside it. Its `cwd` values must stay inside the servers folder,
 * and its `env` may not set the names that change how programs load (both refused at import, with file,
 * field and line).
 */

type DatasetServer = z.infer<typeof datasetServerSchema>;

/** servers.yaml, and the folder it must resolve inside (the one that holds it, or the dataset's parent). */
export interface ServersFile {
  file: string;
  root: string;
}

/** The servers.yaml to read: the one asked for, else servers/servers.yaml beside the dataset folder, else inside. */
export function serversFileFor(dataDir: string, requested: string | undefined): ServersFile {
  if (requested) return { file: path.resolve(requested), root: path.dirname(path.resolve(requested)) };
  const besideData = path.resolve(dataDir, '..', 'servers', 'servers.yaml');
  // The servers/ folder beside the dataset is named by the dataset's layout, not by the operator: it must lie in
  // the folder that holds both (a `servers` link to / is refused).
  if (fs.existsSync(besideData)) return { file: besideData, root: path.dirname(path.resolve(dataDir)) };
  return { file: path.resolve(dataDir, 'servers.yaml'), root: path.resolve(dataDir) };
}

const VARIABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/**
 * Names that change which code a program loads or runs before its own: the dynamic loader's, the shells', and
 * the interpreters' start-up hooks. PATH is set by the launcher (the dataset's Python environment, then the
 * system folders); server packages are installed into that environment, so nothing needs PYTHONPATH.
 */
const LOADER_NAMES = new Set([
  'PATH',
  'PYTHONPATH',
  'PYTHONHOME',
  'PYTHONSTARTUP',
  'PYTHONINSPECT',
  'PYTHONUSERBASE',
  'BASH_ENV',
  'ENV',
  'PERL5OPT',
  'PERL5LIB',
  'NODE_OPTIONS',
  'GCONV_PATH',
  'GLIBC_TUNABLES',
]);
const LOADER_PREFIXES = ['LD_', 'BASH_FUNC_'];

/** Why a dataset's servers.yaml `env` may not set `name`, or undefined when it may. */
export function refusedEnvName(name: string): string | undefined {
  if (!VARIABLE_NAME.test(name)) return `'${name}' is not a variable name`;
  if (LOADER_NAMES.has(name) || LOADER_PREFIXES.some((p) => name.startsWith(p)))
    return `${name} changes how programs load or start: a dataset's env may not set it (docs/dataset-sandbox.md)`;
  return undefined;
}

/** The spec of one server, or the problems (file, field, line) that leave it out. */
function serverSpec(
  name: string,
  value: DatasetServer,
  serversDir: string,
  where: { file: string; lineOf: (p: PropertyKey[]) => number },
): { spec?: ServerSpec; problems: TaskFileProblem[] } {
  if (value.type === 'mcp-remote') return { spec: { transport: 'remote', url: value.endpoint }, problems: [] };
  const at = (...p: string[]) => ({
    file: where.file,
    line: where.lineOf(['servers', name, ...p]),
    field: ['servers', name, ...p].join('.'),
  });
  const env = value.env ?? {};
  const problems: TaskFileProblem[] = [];
  for (const [key, text] of Object.entries(env)) {
    const refused = refusedEnvName(key);
    if (refused) problems.push({ ...at('env', key), message: refused });
    else if (text.includes('\0')) problems.push({ ...at('env', key), message: 'the value holds a NUL character' });
  }
  const cwd = containedPath(serversDir, value.cwd ?? '.', at('cwd'));
  if (cwd.problem) problems.push(cwd.problem);
  if (problems.length || !cwd.path) return { problems };
  const [command, ...args] = value.command;
  return { spec: { transport: 'stdio', command: command!, args, env, cwd: cwd.path }, problems };
}

/**
 * `use_internal_servers` as the reference reads it (absent = true): a server servers.yaml does not define is then
 * taken from the reference framework's own `thinkingbox/tools/mcp_<name>.py`, which no dataset carries.
 */
export interface InternalServers {
  enabled: boolean;
  /** Where servers.yaml says so (its first line when the field is absent). */
  line: number;
}

/** Why a server that servers.yaml does not define cannot run, naming servers.yaml's `use_internal_servers`. */
export function undefinedServerMessage(name: string, serversFile: string, internal: InternalServers | undefined) {
  const base = `server '${name}' is not defined in ${serversFile}`;
  if (!internal?.enabled) return base;
  return (
    `${base}; ${serversFile}:${internal.line}: use_internal_servers is true (absent means true), so the ` +
    `reference framework would take it from its own thinkingbox/tools/mcp_${name}.py, which is not part of the ` +
    `dataset: define '${name}' under servers: in servers.yaml`
  );
}

/**
 * The servers servers.yaml defines, by name; each one that is not valid is a problem (and left out). `dir` is
 * the servers folder as resolved (where the server packages are), unless servers.yaml lies outside its root.
 */
export function readDatasetServers(
  where: ServersFile,
  problems: TaskFileProblem[],
): { servers: Record<string, ServerSpec>; dir?: string; internal?: InternalServers } {
  const serversFile = where.file;
  const contained = containedPath(where.root, serversFile, { file: serversFile, line: 1, field: '' });
  if (contained.problem) {
    problems.push(contained.problem);
    return { servers: {} };
  }
  const serversDir = path.dirname(contained.path);
  const servers: Record<string, ServerSpec> = {};
  const serversYaml = parseYamlFile(serversFile, serversFileSchema);
  problems.push(...serversYaml.problems);
  for (const [name, value] of Object.entries(serversYaml.value?.servers ?? {})) {
    const checked = validateParsed(value, datasetServerSchema, serversFile, (p) =>
      serversYaml.lineOf(['servers', name, ...p]),
    );
    problems.push(...checked.problems.map((p) => ({ ...p, field: `servers.${name}${p.field ? `.${p.field}` : ''}` })));
    if (!checked.value) continue;
    const server = serverSpec(name, checked.value, serversDir, { file: serversFile, lineOf: serversYaml.lineOf });
    problems.push(...server.problems);
    if (server.spec) servers[name] = server.spec;
  }
  const flag = serversYaml.value?.use_internal_servers;
  const internal = serversYaml.value
    ? { enabled: flag ?? true, line: flag == null ? 1 : serversYaml.lineOf(['use_internal_servers']) }
    : undefined;
  return { servers, dir: serversDir, ...(internal ? { internal } : {}) };
}

/**
 * Server package folders in the servers folder: each sub-folder (not a link) holding a pyproject.toml that
 * resolves inside it. `outward` are the links leading out of the dataset: a package holding one is left out
 * (the link itself is already a problem).
 */
export function serverPackagesIn(serversDir: string, outward: TaskFileProblem[], problems: TaskFileProblem[]) {
  if (!fs.existsSync(serversDir)) return [];
  const packages: string[] = [];
  for (const d of fs.readdirSync(serversDir, { withFileTypes: true })) {
    const folder = path.join(serversDir, d.name);
    if (!d.isDirectory() || !fs.existsSync(path.join(folder, 'pyproject.toml'))) continue;
    const pyproject = path.join(folder, 'pyproject.toml');
    const contained = containedPath(folder, pyproject, { file: pyproject, line: 1, field: '' });
    if (contained.problem) problems.push(contained.problem);
    else if (!outward.some((link) => link.file.startsWith(`${folder}${path.sep}`))) packages.push(folder);
  }
  return packages.sort();
}
