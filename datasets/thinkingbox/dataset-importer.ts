import fs from 'node:fs';
import path from 'node:path';
import {
  testListSchema,
  type ImportedScenario,
  type ImportedSuite,
  type ImportedTask,
  type ServerSpec,
} from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, type TaskFileProblem } from '../../config/yaml-file.ts';
import { containedPath, isInside, outwardLinks } from './dataset-paths.ts';
import { readAgent, readScenarios } from './dataset-scenarios.ts';
import { readDatasetServers, serverPackagesIn, serversFileFor } from './dataset-servers.ts';
import { listedTests, type ListedTest } from './listed-tests.ts';
import { importTask } from './task-import.ts';
import { parseTestFiles } from './test-file-parser.ts';
import { readMeta, type TestMeta } from './test-meta-file.ts';

/**
 * `tbt tasks import-thinkingbox`: reads a ThinkingBox-format dataset (docs/thinkingbox-datasets.md) into an
 * imported suite. Test files are read by Python's own parser (thinkingbox/tbt_thinkingbox/parse_test_files.py); their
 * `!` YAML is parsed here with line numbers mapped back into the .py file. Every file or task that cannot be
 * imported is reported with file and line, and the rest still import. Every path the dataset names resolves
 * (links followed) inside the dataset folder, or the servers folder for servers.yaml's (dataset-paths.ts).
 */

export interface ImportRequest {
  /** The dataset folder (holding agent/, scenario/, test_case/). */
  dataDir: string;
  listFile: string;
  /** Default: servers/servers.yaml beside the dataset folder, else servers.yaml inside it. */
  serversFile?: string;
  /** agent/<name>.yaml to use (default: the only one, else `think`). */
  agent?: string;
  /** uids that may be evaluated but never trained on (an evaluation-only benchmark). */
  evaluationOnly?: Set<string>;
  name?: string;
}

export interface ImportResult {
  suite: ImportedSuite;
  problems: TaskFileProblem[];
  /** Fields kept but not used, and similar notes (file and line). */
  warnings: TaskFileProblem[];
  listed: number;
}

/** What converting the listed tasks needs besides the list. */
interface TaskSources {
  request: ImportRequest;
  dataDir: string;
  scenarios: Record<string, ImportedScenario>;
  servers: Record<string, ServerSpec>;
  problems: TaskFileProblem[];
  warnings: TaskFileProblem[];
}

/** The listed tasks, in list order; each test file is parsed once, and its meta file read once. */
function convertListedTasks(wanted: ListedTest[], sources: TaskSources): ImportedTask[] {
  const { request, dataDir, problems } = sources;
  const problem = (file: string, line: number, message: string) => problems.push({ file, line, field: '', message });
  const files = [...new Set(wanted.flatMap((w) => (w.file ? [w.file] : [])))];
  const parsed = new Map(parseTestFiles(files).map((f) => [f.file, f]));
  for (const f of parsed.values()) for (const p of f.problems) problem(p.file, p.line, p.message);
  const metas = new Map<string, TestMeta>();
  const tasks: ImportedTask[] = [];
  const seen = new Set<string>();
  for (const w of wanted) {
    const file = w.file ? parsed.get(w.file) : undefined;
    if (!file || !w.file) continue;
    if (seen.has(w.uid)) {
      problem(request.listFile, w.listLine, `${w.uid} is listed twice`);
      continue;
    }
    seen.add(w.uid);
    const fn = file.tasks.find((t) => t.function === w.fn);
    if (!fn) {
      // A file that did not parse at all has its own problem; otherwise a missing function is this entry's.
      if (file.tasks.length > 0 || file.problems.length === 0)
        problem(
          request.listFile,
          w.listLine,
          `${w.uid}: ${path.relative(dataDir, w.file)} has no test function '${w.fn}' (a function whose first ` +
            `statement is a string starting with '!')`,
        );
      continue;
    }
    if (!metas.has(w.file)) metas.set(w.file, readMeta(w.file, dataDir));
    const task = importTask({
      uid: w.uid,
      file: w.file,
      fn,
      defaults: file.defaults.slice(0, fn.defaults_before),
      meta: metas.get(w.file)!,
      scenarios: sources.scenarios,
      servers: sources.servers,
      evaluationOnly: request.evaluationOnly ?? new Set(),
      problems,
      warnings: sources.warnings,
    });
    if (task) tasks.push(task);
  }
  for (const meta of metas.values()) if (meta.problems.length) problems.push(...meta.problems);
  return tasks;
}

/**
 * The data root (THINKINGBOX_DATA, docs/thinkingbox-datasets.md): the folder holding the dataset folder beside
 * servers/ or support/, as the public data is laid out, resolved. Its support/ is shown to the tool servers, so
 * it must resolve inside the root and hold no link leading out of it; otherwise the root is not recorded.
 */
function dataRootOf(dataDir: string, problems: TaskFileProblem[]): string | undefined {
  const parent = path.dirname(dataDir);
  if (!fs.existsSync(path.join(parent, 'servers')) && !fs.existsSync(path.join(parent, 'support'))) return undefined;
  const root = fs.realpathSync(parent);
  const where = { file: path.join(root, 'support'), line: 1, field: '' };
  const support = containedPath(root, 'support', where);
  const outward = support.path && fs.existsSync(support.path) ? outwardLinks(support.path) : [];
  problems.push(...(support.problem ? [support.problem] : []), ...outward);
  return support.problem || outward.length ? undefined : root;
}

/** The suite keeps what its tasks use (a dataset's other scenarios and servers were still checked). */
function importedSuite(
  request: ImportRequest,
  dataDir: string,
  serverPackages: string[],
  sources: Pick<TaskSources, 'scenarios' | 'servers'>,
  tasks: ImportedTask[],
  dataRoot: string | undefined,
): ImportedSuite {
  const usedScenarios = new Set(tasks.map((t) => t.scenario));
  const usedServers = new Set(tasks.flatMap((t) => Object.keys(t.world_state)));
  return {
    format: 'thinkingbox-import/2',
    name:
      request.name ??
      path.basename(dataDir === path.join(path.dirname(dataDir), 'dataset') ? path.dirname(dataDir) : dataDir),
    dataset_dir: dataDir,
    server_packages: serverPackages,
    ...(dataRoot ? { data_root: dataRoot } : {}),
    servers: Object.fromEntries(Object.entries(sources.servers).filter(([name]) => usedServers.has(name))),
    scenarios: Object.fromEntries(Object.entries(sources.scenarios).filter(([name]) => usedScenarios.has(name))),
    tasks,
  };
}

export function importThinkingboxDataset(request: ImportRequest): ImportResult {
  const dataDir = path.resolve(request.dataDir);
  const problems: TaskFileProblem[] = [];
  const warnings: TaskFileProblem[] = [];
  const list = parseYamlFile(request.listFile, testListSchema);
  problems.push(...list.problems);
  const serversFile = serversFileFor(dataDir, request.serversFile);
  const { servers, dir: serversDir, internal } = readDatasetServers(serversFile, problems);
  // Links leading out of what dataset code sees (the dataset folder, the servers folder mounted as a server's
  // cwd) are problems even where nothing names them.
  const realDataDir = fs.existsSync(dataDir) ? fs.realpathSync(dataDir) : dataDir;
  const outward = [
    ...outwardLinks(realDataDir),
    ...(serversDir && !isInside(serversDir, realDataDir) ? outwardLinks(serversDir) : []),
  ];
  problems.push(...outward);
  const agent = readAgent(dataDir, request.agent, problems);
  const scenarios = readScenarios(dataDir, agent, servers, serversFile.file, problems, internal);
  const wanted = listedTests(list, request.listFile, dataDir, problems);
  const sources: TaskSources = { request, dataDir, scenarios, servers, problems, warnings };
  const tasks = convertListedTasks(wanted, sources);
  const serverPackages = serversDir ? serverPackagesIn(serversDir, outward, problems) : [];
  const dataRoot = dataRootOf(dataDir, problems);
  return {
    suite: importedSuite(request, dataDir, serverPackages, sources, tasks, dataRoot),
    problems,
    warnings,
    listed: wanted.length,
  };
}
