import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dns from 'node:dns/promises';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { readEnvironment } from '../config/environment.ts';
import { BadInputError } from '../core/errors.ts';
import { onCpus } from './cpu-affinity.ts';
import { waitFor } from './daemon.ts';
import type { ExpectedProcess } from './pid-identity.ts';
import type { PolicyLora } from '../config/lora-serving.ts';
import { LORA_ADAPTER_NAME, vllmLoraArgs } from './policy-lora.ts';
import { gpuLearnerDir, pythonBinary, smallModelDir, vllmPythonBinary } from './python-env.ts';

/**
 * Starts a local policy server as a child process. `vllm` (the default): vLLM's CPU build from its own venv,
 * in dev mode so the GPU worker can pause it, reload weights from a folder and set the weight version (the port
 * is bound to 127.0.0.1 unless `host` names another, and dev mode's routes need the run's token:
 * tbt_gpu/vllm_route_guard.py).
 * `builtin`: the hand-written server in gpu-learner/tbt_gpu/policy_server, kept because it starts in seconds with
 * ~0.6 GB (template and fault tests, the benchmark baseline); it speaks the same routes for tokens and weight sync.
 */

export type PolicyEngine = 'vllm' | 'builtin';

/**
 * What the pid of a server started here runs, one entry per engine: whoever records that pid in a file checks
 * it against these before signalling it (infra/pid-identity.ts), so a stale pid file kills nothing else.
 */
export const policyServerProcesses: readonly ExpectedProcess[] = [
  { argvIncludes: ['tbt_gpu.policy_server'] },
  { argvIncludes: ['vllm.entrypoints.openai.api_server'] },
];

export interface PolicyServerHandle {
  baseUrl: string;
  model: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** A TCP port free on `host` now (the caller binds it soon after). */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, host, r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/**
 * A fresh bearer token for one run of a local server, in a file only this user can read (created 0600,
 * replaced atomically): the file, never the token, is what goes on a command line.
 */
export function writeRunToken(file: string): string {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.rmSync(tmp, { force: true });
  fs.writeFileSync(tmp, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
  fs.renameSync(tmp, file);
  return file;
}

async function healthy(url: string): Promise<boolean> {
  try {
    const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
    return r.ok;
  } catch {
    return false;
  }
}

/** `detached`: the server outlives this process (the GPU worker restarts and finds it again by pid file). */
export async function startPolicyServer(
  options: {
    engine?: PolicyEngine;
    port?: number;
    modelDir?: string;
    chatTemplate?: string;
    logFile?: string;
    extraArgs?: string[];
    detached?: boolean;
    /**
     * 0600 file with the token the server's weight-sync and other control routes require (the built-in
     * engine's own check; vLLM's through tbt_gpu/vllm_route_guard.py). Without it vLLM's dev-mode routes are open
     * to every local process (it listens on 127.0.0.1 only; docs/security.md).
     */
    reloadTokenFile?: string;
    /** Folders weights may be reloaded from (the campaign's). */
    weightsRoots?: string[];
    /** LoRA mode (vLLM only): serve the base model plus one hot-swappable adapter, started at zero in `adapterDir`. */
    lora?: PolicyLora & { adapterDir: string };
    /** vLLM only: log-probabilities of the distribution sampled (temperature applied), not the raw model's. */
    logprobs?: 'processed';
    /**
     * The name other hosts or containers reach the server at (TBT_POLICY_SERVER_HOST): it listens on the address
     * that name resolves to here, and the base URL names it. Unset: 127.0.0.1, this machine only.
     */
    host?: string;
  } = {},
): Promise<PolicyServerHandle> {
  // The address the name resolves to, not every interface: on compose's network that is the container's address
  // there, so only that network reaches the server (its ports are not published).
  const bind = options.host ? (await dns.lookup(options.host, { family: 4 })).address : '127.0.0.1';
  const port = options.port ?? (await freePort(bind));
  const modelDir = options.modelDir ?? smallModelDir();
  const engine = options.engine ?? 'vllm';
  if (options.lora && engine !== 'vllm')
    throw new BadInputError('learner.lora: needs episode.policy.engine vllm (the built-in server loads no adapters)');
  if (options.logprobs && engine !== 'vllm')
    throw new BadInputError(
      'learner.sampler_logprobs: processed needs episode.policy.engine vllm (the built-in server serves raw ones)',
    );
  const served = path.basename(modelDir);
  // In LoRA mode requests name the adapter; the base model keeps its own name beside it.
  const model = options.lora ? LORA_ADAPTER_NAME : served;
  const log = options.logFile ? fs.openSync(options.logFile, 'a') : 'ignore';
  const child =
    engine === 'vllm'
      ? spawnVllm(bind, port, modelDir, served, options, log)
      : spawnBuiltin(bind, port, modelDir, options, log);
  // vLLM runs its engine in a second process: it always gets a process group of its own, stopped as a whole.
  const signal = (sig: NodeJS.Signals) => {
    try {
      if (engine === 'vllm') process.kill(-child.pid!, sig);
      else child.kill(sig);
    } catch {
      // already gone
    }
  };
  if (options.detached) child.unref();
  // A child server must not outlive its parent (an interrupted CLI or test would leave it holding a core).
  else process.once('exit', () => signal('SIGKILL'));
  const root = `http://${options.host ?? '127.0.0.1'}:${port}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null) signal('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
    if (child.exitCode === null) signal('SIGKILL');
  };
  try {
    await waitFor(
      `policy server on port ${port}`,
      async () => {
        if (child.exitCode !== null)
          throw new Error(
            `policy server exited with code ${child.exitCode}${options.logFile ? ` (log ${options.logFile})` : ''}`,
          );
        return healthy(root);
      },
      engine === 'vllm' ? 900_000 : 180_000, // vLLM: ~35 s on an idle 2-core machine, minutes when it is busy
      options.logFile,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { baseUrl: `${root}/v1`, model, process: child, stop };
}

type Log = number | 'ignore';
type SpawnOptions = {
  chatTemplate?: string;
  extraArgs?: string[];
  detached?: boolean;
  reloadTokenFile?: string;
  weightsRoots?: string[];
  lora?: PolicyLora & { adapterDir: string };
  logprobs?: 'processed';
};

function spawnBuiltin(host: string, port: number, modelDir: string, options: SpawnOptions, log: Log): ChildProcess {
  const args = ['-m', 'tbt_gpu.policy_server', '--model', modelDir, '--host', host, '--port', String(port)];
  if (options.chatTemplate) args.push('--chat-template', options.chatTemplate);
  if (options.reloadTokenFile) args.push('--token-file', options.reloadTokenFile);
  for (const root of options.weightsRoots ?? []) args.push('--weights-root', root);
  return spawn(...onCpus(pythonBinary(), [...args, ...(options.extraArgs ?? [])], readEnvironment().TBT_POLICY_CPUS), {
    cwd: gpuLearnerDir,
    stdio: ['ignore', log, log],
    detached: options.detached ?? false,
  });
}

/**
 * vLLM's settings that would otherwise change what is sampled: `--generation-config vllm` (no sampling defaults
 * from the model folder), raw logprobs (before temperature and top-p/top-k) unless the learner asks for the
 * sampled distribution's (`learner.sampler_logprobs: processed`: temperature applied, as the learner applies it),
 * tool calls not grammar-constrained. `--enforce-eager` starts in ~35 s instead of ~140 s (graph compilation).
 */
function spawnVllm(
  host: string,
  port: number,
  modelDir: string,
  model: string,
  options: SpawnOptions,
  log: Log,
): ChildProcess {
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server',
    ...['--model', modelDir, '--served-model-name', model, '--host', host, '--port', String(port)],
    ...['--max-model-len', String(readEnvironment().TBT_VLLM_MAX_MODEL_LEN), '--dtype', 'float32'],
    ...['--generation-config', 'vllm', '--enforce-eager'],
    ...['--logprobs-mode', options.logprobs === 'processed' ? 'processed_logprobs' : 'raw_logprobs'],
    // The receiving end of `policy.weight_transport: collective` (idle unless called).
    ...['--worker-extension-cls', 'tbt_gpu.vllm_weight_receiver.WeightReceiver'],
    // Each completion answered with the weights that served it (tbt_gpu/vllm_served_weights.py); listed before the
    // guard, so the guard (added last, outermost) refuses a call without the token before the label tracking sees it.
    ...['--middleware', 'tbt_gpu.vllm_served_weights.tag_served_weights'],
    // Dev mode's control routes (weight sync, pause, LoRA loading) behind the run's token: tbt_gpu/vllm_route_guard.py.
    ...(options.reloadTokenFile ? ['--middleware', 'tbt_gpu.vllm_route_guard.guard_routes'] : []),
    ...(options.lora ? vllmLoraArgs(options.lora, modelDir, options.lora.adapterDir) : []),
    ...(options.chatTemplate ? ['--chat-template', options.chatTemplate] : []),
    ...(options.extraArgs ?? []),
  ];
  return spawn(...onCpus(vllmPythonBinary(), args, readEnvironment().TBT_POLICY_CPUS), {
    cwd: gpuLearnerDir,
    stdio: ['ignore', log, log],
    detached: true,
    env: {
      ...process.env,
      VLLM_SERVER_DEV_MODE: '1',
      ...(options.reloadTokenFile
        ? {
            TBT_POLICY_TOKEN_FILE: options.reloadTokenFile,
            TBT_WEIGHTS_ROOTS: (options.weightsRoots ?? []).join(path.delimiter),
          }
        : {}),
      // LoRA mode: each step's adapter replaces the served one through /v1/load_lora_adapter.
      ...(options.lora ? { VLLM_ALLOW_RUNTIME_LORA_UPDATING: '1' } : {}),
      // vLLM spawns its worker: the receiver's package must be on the path explicitly, not just the cwd.
      PYTHONPATH: [gpuLearnerDir, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter),
      VLLM_CPU_KVCACHE_SPACE: process.env.VLLM_CPU_KVCACHE_SPACE ?? '2',
      // vLLM kills its engine when one forward pass takes over 300 s: seen on an overloaded 2-core machine.
      VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS: process.env.VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS ?? '1800',
      VLLM_ENFORCE_STRICT_TOOL_CALLING: '0',
      HF_HUB_OFFLINE: '1',
      TRANSFORMERS_OFFLINE: '1',
      VLLM_NO_USAGE_STATS: '1',
      DO_NOT_TRACK: '1',
    },
  });
}
