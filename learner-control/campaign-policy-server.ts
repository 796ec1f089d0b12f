import fs from 'node:fs';
import path from 'node:path';
import { readEnvironment } from '../config/environment.ts';
import { readPid, stopPid } from '../infra/daemon.ts';
import { startPolicyServer, writeRunToken, type PolicyEngine } from '../infra/embedded-policy-server.ts';
import type { PolicyLora } from '../config/lora-serving.ts';
import { smallModelDir } from '../infra/python-env.ts';
import type { LearnerFiles } from './learner-process.ts';
import { policyServerUrlFile, policyTokenFile } from './policy-sync-token.ts';

/**
 * The campaign's embedded policy server (the local default), one per campaign, run by node 0's GPU worker:
 * started detached so it outlives a GPU-worker crash, and found again through its pid file and the address
 * recorded next to it.
 */

export interface PolicyServerAddress {
  baseUrl: string;
  model: string;
}

/**
 * The campaign's running server on `engine` (in LoRA mode with `lora`) if it answers; otherwise (or with
 * `restart`) a new one.
 */
export async function ensureEmbeddedPolicyServer(
  files: LearnerFiles,
  engine: PolicyEngine,
  restart = false,
  lora?: PolicyLora,
  logprobs?: 'processed',
): Promise<PolicyServerAddress> {
  const { dir, policyServerPid: pidFile } = files;
  fs.mkdirSync(dir, { recursive: true });
  const urlFile = policyServerUrlFile(dir);
  if (!restart && readPid(pidFile) !== undefined && fs.existsSync(urlFile)) {
    const known = JSON.parse(fs.readFileSync(urlFile, 'utf8')) as {
      baseUrl: string;
      model: string;
      engine?: string;
      lora?: PolicyLora;
      logprobs?: 'processed';
    };
    const ok = await fetch(known.baseUrl.replace(/\/v1$/, '/health'), { signal: AbortSignal.timeout(3000) }).then(
      (r) => r.ok,
      () => false,
    );
    const sameMode = JSON.stringify(known.lora ?? null) === JSON.stringify(lora ?? null) && known.logprobs === logprobs;
    if (ok && sameMode && (known.engine ?? 'builtin') === engine) return { baseUrl: known.baseUrl, model: known.model };
  }
  // An old server that is alive but not answering is replaced, not left running beside the new one.
  await stopEmbeddedPolicyServer(files);
  const handle = await startPolicyServer({
    engine,
    logFile: path.join(dir, 'policy-server.log'),
    detached: true,
    // The built-in server's weight-sync routes need this run's token and load only from these folders.
    reloadTokenFile: writeRunToken(policyTokenFile(dir)),
    weightsRoots: [dir, smallModelDir()],
    ...(lora ? { lora: { ...lora, adapterDir: loraZeroAdapterDir(dir) } } : {}),
    ...(logprobs ? { logprobs } : {}),
    // Compose: rollout workers in other containers reach it by the GPU worker's name on the network.
    host: readEnvironment().TBT_POLICY_SERVER_HOST,
  });
  const server = { baseUrl: handle.baseUrl, model: handle.model };
  fs.writeFileSync(pidFile, String(handle.process.pid));
  fs.writeFileSync(urlFile, JSON.stringify({ ...server, engine, lora, logprobs }));
  return server;
}

/** Where a LoRA-mode server of the campaign folder `dir` gets its zero adapter (the base model, as an adapter). */
export function loraZeroAdapterDir(dir: string): string {
  return path.join(dir, 'lora-zero-adapter');
}

/** Stops the campaign's embedded policy server (its whole process group); false when none was running. */
export async function stopEmbeddedPolicyServer(files: LearnerFiles): Promise<boolean> {
  const pid = readPid(files.policyServerPid);
  if (pid === undefined) return false;
  await stopPid(-pid, 20_000);
  return true;
}
