import path from 'node:path';
import { PYTHON_PLACEHOLDER, type StdioServerSpec } from '../../config/thinkingbox-schema.ts';
import type { DatasetEnvironment } from './dataset-environment.ts';

/**
 * What starts one dataset tool server: the argv and the environment, before any sandbox wraps it. The
 * environment is an allow-list: the dataset's own `env` from servers.yaml, PATH with the dataset venv first,
 * PYTHONPATH with the server packages, the bytecode cache in the venv, and a UTF-8 locale; nothing of the
 * worker's own environment (its database URL, API keys) is passed on. The isolation layer takes this spec and runs it contained.
 */

export interface LaunchSpec {
  command: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
}

export function serverLaunchSpec(spec: StdioServerSpec, dataset: DatasetEnvironment): LaunchSpec {
  const resolve = (arg: string) => arg.replaceAll(PYTHON_PLACEHOLDER, dataset.python);
  return {
    command: resolve(spec.command),
    args: spec.args.map(resolve),
    env: {
      PATH: [path.dirname(dataset.python), '/usr/local/bin', '/usr/bin', '/bin'].join(path.delimiter),
      PYTHONPATH: dataset.packages.join(path.delimiter),
      // Bytecode is cached in the venv, never beside the dataset's sources (read in place, never written).
      PYTHONPYCACHEPREFIX: path.join(dataset.venv, 'pycache'),
      PYTHONUNBUFFERED: '1',
      LANG: 'C.UTF-8',
      ...spec.env,
    },
    cwd: spec.cwd,
  };
}
