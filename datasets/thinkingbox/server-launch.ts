import fs from 'node:fs';
import path from 'node:path';
import { PYTHON_PLACEHOLDER, type StdioServerSpec } from '../../config/thinkingbox-schema.ts';
import { BadInputError } from '../../core/errors.ts';
import type { DatasetEnvironment } from './dataset-environment.ts';
import { unchangedPath } from './dataset-paths.ts';
import { refusedEnvName } from './dataset-servers.ts';

/**
 * What starts one dataset tool server: the argv and the environment, before any sandbox wraps it. The
 * environment is an allow-list: the dataset's own `env` from servers.yaml, PATH with the dataset venv first (the
 * server packages are installed in it, their console scripts in its bin), THINKINGBOX_DATA (the data root the
 * import recorded, as the reference's servers expect it) and a UTF-8 locale; nothing of the worker's own
 * environment (its database URL, API keys) is passed on. The dataset sandbox (dataset-sandbox.ts) runs it
 * contained, with `readOnly` (the data root's support/), `pathPrefix` and the working directory visible read-only.
 */

export interface LaunchSpec {
  command: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** Folders the server reads besides its working directory and its venv: the data root's support/. */
  readOnly?: string[];
  /** Folders first on PATH (the dataset venv's bin); the sandbox mounts them and the interpreter behind them. */
  pathPrefix?: string[];
}

/** The support folder below the data root: large files the servers read through THINKINGBOX_DATA. */
export const SUPPORT_FOLDER = 'support';

/** `<dataRoot>/support` when it exists; it must still be the folder the import checked (no link put there since). */
function supportFolder(dataRoot: string): string | undefined {
  const support = path.join(dataRoot, SUPPORT_FOLDER);
  if (!fs.existsSync(support)) return undefined;
  return unchangedPath(support, 'THINKINGBOX_DATA support folder');
}

export function serverLaunchSpec(spec: StdioServerSpec, dataset: DatasetEnvironment): LaunchSpec {
  // The importer refuses these; a suite imported by an older version may still carry them.
  for (const name of Object.keys(spec.env)) {
    const refused = refusedEnvName(name);
    if (refused) throw new BadInputError(`server ${spec.command}: env: ${refused}`);
  }
  const resolve = (arg: string) => arg.replaceAll(PYTHON_PLACEHOLDER, dataset.python);
  const support = dataset.dataRoot ? supportFolder(dataset.dataRoot) : undefined;
  return {
    command: resolve(spec.command),
    args: spec.args.map(resolve),
    env: {
      ...spec.env,
      ...(dataset.dataRoot ? { THINKINGBOX_DATA: dataset.dataRoot } : {}),
      PATH: [path.dirname(dataset.python), '/usr/local/bin', '/usr/bin', '/bin'].join(path.delimiter),
      // No PYTHONPYCACHEPREFIX: it would hide the bytecode pip compiled into the venv and recompile every
      // dependency at each start (6.5 s instead of 2.8 s for a bench server). Nothing is written: the dataset and
      // the venv are read-only in the sandbox, and the sandbox sets PYTHONDONTWRITEBYTECODE.
      PYTHONUNBUFFERED: '1',
      LANG: 'C.UTF-8',
    },
    cwd: unchangedPath(spec.cwd, `server ${spec.command}: cwd`),
    readOnly: support ? [support] : [],
    pathPrefix: [path.dirname(dataset.python)],
  };
}
