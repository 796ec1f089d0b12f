import type { z } from 'zod';

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

export function checkLearnerTopology(learner: LearnerTopologyFields, ctx: z.RefinementCtx): void {
  const problem = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  const worldSize = learner.nodes * learner.gpus_per_node;
  const product = `nodes x gpus_per_node = ${learner.nodes} x ${learner.gpus_per_node} = ${worldSize}`;
  if (learner.world_size !== undefined && learner.world_size !== worldSize)
    problem(['world_size'], `${learner.world_size} ranks, but ${product}`);
  const endpoint = learner.rdzv_endpoint;
  if (endpoint !== undefined && !/^[A-Za-z0-9.-]+:\d{1,5}$/.test(endpoint))
    problem(['rdzv_endpoint'], `"${endpoint}" is not host:port`);
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
