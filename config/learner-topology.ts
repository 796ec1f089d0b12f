import type { z } from 'zod';
import { BadInputError } from '../core/errors.ts';

/**
 * The learner's topology as a campaign states it: `nodes` x `gpus_per_node` ranks (the world size), one GPU
 * worker per node starting that node's ranks (`gpu_workers`, each with its node rank), a c10d rendezvous endpoint
 * for more than one node, or `attach_url` for a learner started outside. Checked when the YAML is parsed, so
 * `tbt train` (dry run included) rejects a topology that could never start, naming the field.
 */

export interface LearnerTopologyFields {
  nodes: number;
  gpus_per_node: number;
  world_size?: number | undefined;
  rdzv_endpoint?: string | undefined;
  gpu_workers?: { host: string; node_rank: number }[] | undefined;
  attach_url?: string | undefined;
  attach_token_file?: string | undefined;
}

/**
 * A host the operator fills in before anything starts, written `<name>` (lower-case letters, digits, dashes): a
 * shipped config such as config/reference-q38.yaml cannot know the operator's machines, yet its dry run must show
 * the whole launch. A config holding one loads and dry-runs; `requireFilledPlaceholders` refuses it at a real start.
 */
const hostPlaceholder = /^<[a-z0-9][a-z0-9-]*>$/;
const rdzvEndpointPattern = /^([A-Za-z0-9.-]+|<[a-z0-9][a-z0-9-]*>):\d{1,5}$/;

export function isHostPlaceholder(host: string): boolean {
  return hostPlaceholder.test(host);
}

/** Every learner field that still holds a host placeholder, with its value, in field order. */
export function learnerPlaceholders(learner: LearnerTopologyFields): { field: string; value: string }[] {
  const found: { field: string; value: string }[] = [];
  const endpoint = learner.rdzv_endpoint;
  if (endpoint !== undefined && isHostPlaceholder(endpoint.replace(/:\d+$/, '')))
    found.push({ field: 'learner.rdzv_endpoint', value: endpoint });
  learner.gpu_workers?.forEach((w, i) => {
    if (isHostPlaceholder(w.host)) found.push({ field: `learner.gpu_workers[${i}].host`, value: w.host });
  });
  return found;
}

/** Bad input naming the first placeholder left in `configFile`: nothing may start on a host nobody named. */
export function requireFilledPlaceholders(learner: LearnerTopologyFields, configFile: string): void {
  const left = learnerPlaceholders(learner);
  if (left.length === 0) return;
  const { field, value } = left[0]!;
  throw new BadInputError(
    `${configFile}: field ${field}: "${value}" is a placeholder: replace it with the real host name` +
      (left.length > 1
        ? ` (${left.length - 1} more: ${left
            .slice(1)
            .map((p) => p.field)
            .join(', ')})`
        : '') +
      '; `tbt train --dry-run` shows what each host runs',
  );
}

export function checkLearnerTopology(learner: LearnerTopologyFields, ctx: z.RefinementCtx): void {
  const problem = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  const worldSize = learner.nodes * learner.gpus_per_node;
  const product = `nodes x gpus_per_node = ${learner.nodes} x ${learner.gpus_per_node} = ${worldSize}`;
  if (learner.world_size !== undefined && learner.world_size !== worldSize)
    problem(['world_size'], `${learner.world_size} ranks, but ${product}`);
  const endpoint = learner.rdzv_endpoint;
  if (endpoint !== undefined && !rdzvEndpointPattern.test(endpoint))
    problem(['rdzv_endpoint'], `"${endpoint}" is not host:port (the host may be a placeholder such as <node-0-host>)`);
  if (learner.attach_url !== undefined) {
    // Started outside: no GPU worker launches anything, but every request needs that learner's token.
    if (learner.attach_token_file === undefined)
      problem(['attach_token_file'], "required with attach_url: the learner's control.token file");
    return;
  }
  if (learner.nodes > 1 && endpoint === undefined)
    problem(['rdzv_endpoint'], `required when nodes > 1 (${learner.nodes}): host:port of node 0's c10d rendezvous`);
  const workers = learner.gpu_workers;
  if (workers === undefined) {
    if (learner.nodes > 1)
      problem(['gpu_workers'], `required when nodes > 1: one GPU worker (host, node_rank) per node, ${learner.nodes}`);
    return;
  }
  if (workers.length !== learner.nodes)
    problem(['gpu_workers'], `${workers.length} GPU worker(s) for ${learner.nodes} node(s): one per node`);
  const ranks = new Map<number, number>();
  const hosts = new Map<string, number>();
  workers.forEach((w, i) => {
    if (w.node_rank >= learner.nodes)
      problem(
        ['gpu_workers', i, 'node_rank'],
        `${w.node_rank} is outside 0..${learner.nodes - 1} (nodes: ${learner.nodes})`,
      );
    else if (ranks.has(w.node_rank))
      problem(['gpu_workers', i, 'node_rank'], `${w.node_rank} is already gpu_workers[${ranks.get(w.node_rank)}]'s`);
    ranks.set(w.node_rank, i);
    if (hosts.has(w.host))
      problem(['gpu_workers', i, 'host'], `"${w.host}" is already gpu_workers[${hosts.get(w.host)}]'s (one per node)`);
    hosts.set(w.host, i);
  });
}

/** GPU worker hosts in node-rank order (node 0 first), or undefined when the campaign names none. */
export function nodeHosts(learner: LearnerTopologyFields): string[] | undefined {
  if (!learner.gpu_workers) return undefined;
  return [...learner.gpu_workers].sort((a, b) => a.node_rank - b.node_rank).map((w) => w.host);
}
