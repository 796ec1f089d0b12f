import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { waitFor } from './daemon.ts';
import { gpuLearnerDir, pythonBinary, smallModelDir } from './python-env.ts';

/** Starts the embedded CPU policy server (gpu-learner/tbt_gpu/policy_server) as a child process. */

export interface PolicyServerHandle {
  baseUrl: string;
  model: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
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
    port?: number;
    modelDir?: string;
    chatTemplate?: string;
    logFile?: string;
    extraArgs?: string[];
    detached?: boolean;
    /** 0600 file with the token /reload_weights requires; without it the server refuses every reload. */
    reloadTokenFile?: string;
    /** Folders weights may be reloaded from (the campaign's). */
    weightsRoots?: string[];
  } = {},
): Promise<PolicyServerHandle> {
  const port = options.port ?? (await freePort());
  const modelDir = options.modelDir ?? smallModelDir();
  const model = path.basename(modelDir);
  const args = [
    '-m',
    'tbt_gpu.policy_server',
    '--model',
    modelDir,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    ...(options.chatTemplate ? ['--chat-template', options.chatTemplate] : []),
    ...(options.reloadTokenFile ? ['--token-file', options.reloadTokenFile] : []),
    ...(options.weightsRoots ?? []).flatMap((root) => ['--weights-root', root]),
    ...(options.extraArgs ?? []),
  ];
  const log = options.logFile ? fs.openSync(options.logFile, 'a') : 'ignore';
  const child = spawn(pythonBinary(), args, {
    cwd: gpuLearnerDir,
    stdio: ['ignore', log, log],
    detached: options.detached ?? false,
  });
  if (options.detached) child.unref();
  // A child server must not outlive its parent (an interrupted CLI or test would leave it holding a core).
  else process.once('exit', () => child.kill('SIGKILL'));
  const root = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    if (child.exitCode === null) child.kill('SIGKILL');
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
      180_000,
      options.logFile,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { baseUrl: `${root}/v1`, model, process: child, stop };
}
