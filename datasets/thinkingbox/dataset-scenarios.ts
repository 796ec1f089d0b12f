import fs from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import {
  agentFileSchema,
  scenarioFileSchema,
  type ImportedScenario,
  type ServerSpec,
} from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, type TaskFileProblem } from '../../config/yaml-file.ts';
import { containedPath } from './dataset-paths.ts';
import { undefinedServerMessage, type InternalServers } from './dataset-servers.ts';

/**
 * A dataset's scenarios as imported: each scenario/<name>.yaml combined with the chosen agent/<name>.yaml (its
 * system instructions and builtin tools). A scenario whose servers are not defined, or whose visible tool has
 * a builtin tool's name, is a problem (and left out); so is a file that resolves outside the dataset folder.
 */

type AgentFile = z.infer<typeof agentFileSchema>;
type ScenarioFile = z.infer<typeof scenarioFileSchema>;

export interface DatasetAgent {
  name: string;
  file: string;
  value: AgentFile;
}

/** The YAML files of `dataDir/<folder>`; one that resolves (links followed) outside `dataDir` is a problem. */
function yamlFilesIn(dataDir: string, folder: string, problems: TaskFileProblem[]): string[] {
  const dir = path.join(dataDir, folder);
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => path.join(dir, f))
    .filter((file) => {
      const contained = containedPath(dataDir, file, { file, line: 1, field: '' });
      if (contained.problem) problems.push(contained.problem);
      return !contained.problem;
    });
}

const stem = (file: string) => path.basename(file).replace(/\.ya?ml$/, '');

/** agent/<name>.yaml: the one asked for, else the only one, else `think`; undefined (a problem) when missing. */
export function readAgent(
  dataDir: string,
  requested: string | undefined,
  problems: TaskFileProblem[],
): DatasetAgent | undefined {
  const agents = new Map<string, { file: string; value: AgentFile }>();
  for (const file of yamlFilesIn(dataDir, 'agent', problems)) {
    const r = parseYamlFile(file, agentFileSchema);
    problems.push(...r.problems);
    if (r.value) agents.set(stem(file), { file, value: r.value });
  }
  const agentName = requested ?? (agents.size === 1 ? [...agents.keys()][0]! : 'think');
  const agent = agents.get(agentName);
  if (agent) return { name: agentName, ...agent };
  problems.push({
    file: path.join(dataDir, 'agent'),
    line: 1,
    field: '',
    message:
      `no agent/${agentName}.yaml with system_instructions (found: ${[...agents.keys()].join(', ') || 'none'}; ` +
      `choose one with --agent)`,
  });
  return undefined;
}

function importedScenario(file: string, s: ScenarioFile, agent: DatasetAgent): ImportedScenario {
  return {
    name: stem(file),
    agent: agent.name,
    agent_prompt: agent.value.system_instructions,
    builtin_tools: agent.value.builtin_tools.map((t) => ({
      name: t.name,
      description: t.description,
      input_schema: t.input_schema,
      is_end_turn: t.is_end_turn,
    })),
    parallel_tool_calls: agent.value.parallel_tool_calls,
    bot_instructions: s.bot_instructions ?? '',
    world_state: s.world_state,
    tools: s.tools.map((t) => ({
      name: t.name,
      ...(t.override_description != null ? { description: t.override_description } : {}),
      ...(t.override_arg_description ? { arg_descriptions: t.override_arg_description } : {}),
      ...(t.direct_response != null ? { direct_response: t.direct_response } : {}),
      ...(t.is_end_turn ? { is_end_turn: true } : {}),
    })),
    tags: s.tags ?? [],
    file,
  };
}

/** The scenarios by name (none without an agent, though every file is still checked). */
export function readScenarios(
  dataDir: string,
  agent: DatasetAgent | undefined,
  servers: Record<string, ServerSpec>,
  serversFile: string,
  problems: TaskFileProblem[],
  internal?: InternalServers,
): Record<string, ImportedScenario> {
  const scenarios: Record<string, ImportedScenario> = {};
  for (const file of yamlFilesIn(dataDir, 'scenario', problems)) {
    const r = parseYamlFile(file, scenarioFileSchema);
    problems.push(...r.problems);
    if (!r.value || !agent) continue;
    const s = r.value;
    const missing = Object.keys(s.world_state).filter((server) => !servers[server]);
    if (missing.length) {
      problems.push({
        file,
        line: r.lineOf(['world_state', missing[0]!]),
        field: `world_state.${missing[0]}`,
        message: undefinedServerMessage(missing[0]!, serversFile, internal),
      });
      continue;
    }
    const builtin = new Set(agent.value.builtin_tools.map((t) => t.name));
    const clash = s.tools.findIndex((t) => builtin.has(t.name));
    if (clash >= 0) {
      problems.push({
        file,
        line: r.lineOf(['tools', clash, 'name']),
        field: `tools[${clash}].name`,
        message:
          `tool '${s.tools[clash]!.name}' is also a builtin tool of agent ${agent.name} ` +
          `(a duplicate name is an error)`,
      });
      continue;
    }
    scenarios[stem(file)] = importedScenario(file, s, agent);
  }
  return scenarios;
}
