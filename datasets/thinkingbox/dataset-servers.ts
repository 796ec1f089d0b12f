import fs from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import { datasetServerSchema, serversFileSchema, type ServerSpec } from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, validateParsed, type TaskFileProblem } from '../../config/yaml-file.ts';

/**
 * A dataset's tool servers: servers.yaml (beside the dataset folder, in servers/, or inside it) read into
 * server specs, and the server packages kept beside it.
 */

type DatasetServer = z.infer<typeof datasetServerSchema>;

/** The servers.yaml to read: the one asked for, else servers/servers.yaml beside the dataset folder, else inside. */
export function serversFileFor(dataDir: string, requested: string | undefined): string {
  const besideData = path.join(dataDir, '..', 'servers', 'servers.yaml');
  return path.resolve(requested ?? (fs.existsSync(besideData) ? besideData : path.join(dataDir, 'servers.yaml')));
}

function serverSpec(value: DatasetServer, serversDir: string): ServerSpec {
  if (value.type === 'mcp-remote') return { transport: 'remote', url: value.url };
  const [command, ...args] = value.command;
  return {
    transport: 'stdio',
    command: command!,
    args,
    env: value.env ?? {},
    cwd: path.resolve(serversDir, value.cwd ?? '.'),
  };
}

/** The servers servers.yaml defines, by name; each one that is not valid is a problem (and left out). */
export function readDatasetServers(serversFile: string, problems: TaskFileProblem[]): Record<string, ServerSpec> {
  const serversDir = path.dirname(serversFile);
  const servers: Record<string, ServerSpec> = {};
  const serversYaml = parseYamlFile(serversFile, serversFileSchema);
  problems.push(...serversYaml.problems);
  for (const [name, value] of Object.entries(serversYaml.value?.servers ?? {})) {
    const checked = validateParsed(value, datasetServerSchema, serversFile, (p) =>
      serversYaml.lineOf(['servers', name, ...p]),
    );
    problems.push(...checked.problems.map((p) => ({ ...p, field: `servers.${name}${p.field ? `.${p.field}` : ''}` })));
    if (checked.value) servers[name] = serverSpec(checked.value, serversDir);
  }
  return servers;
}

/** Server package folders beside servers.yaml: each sub-folder holding a pyproject.toml. */
export function serverPackagesIn(serversDir: string): string[] {
  if (!fs.existsSync(serversDir)) return [];
  return fs
    .readdirSync(serversDir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && fs.existsSync(path.join(serversDir, d.name, 'pyproject.toml')))
    .map((d) => path.join(serversDir, d.name))
    .sort();
}
