/**
 * Driving one campaign run of the on-demand suites (scripts/crash-test.ts, scripts/fault-test.ts): the `tbt`
 * command, a Temporal client that survives a server restart, the campaign's phases, waiting for a phase and for
 * the end of the workflow chain while bringing back workers that died (unless the suite holds them down).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { Client, type Connection } from '@temporalio/client';
import { repoRoot, type Environment } from '../config/environment.ts';
import { startWorkers, workerKinds, workerPid, type WorkerKind } from '../infra/local-workers.ts';
import { connectTemporalClient } from '../infra/temporal-connection.ts';
import { statusQuery, type CampaignStatus } from '../workflows/campaign-workflow.ts';
import type { RunEnd } from './campaign-run-checks.ts';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const now = () => Date.now();
export const secs = (ms: number) => Math.round(ms / 100) / 10;
/** A compact UTC time stamp for campaign ids: 20261202-181500. */
export const timeStamp = () => new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');

/**
 * A point of the campaign: a training step, the probe, the evaluation after training, the report.
 * A training step n runs while the status says stage 'train', step = n - 1.
 */
export type Phase = { kind: 'step'; step: number } | { kind: 'probe' | 'evaluate-after' | 'report' };
// Every Temporal call of a driver has a deadline: on a machine out of memory a status query once never answered and
// held the fault suite for 20 minutes; undefined (no answer) is what callers already handle.
const CALL_TIMEOUT_MS = 30_000;
const STAGE_ORDER = ['ingest', 'probe', 'evaluate-before', 'train', 'evaluate-after', 'report', 'done'];
export const phaseLabel = (p: Phase) => (p.kind === 'step' ? `training step ${p.step}` : p.kind);

/** True once the campaign is in (or past) the phase. */
export function reached(s: CampaignStatus, phase: Phase): boolean {
  if (phase.kind === 'step')
    return (s.stage === 'train' && s.step >= phase.step - 1) || s.step >= phase.step || s.stage === 'done';
  return STAGE_ORDER.indexOf(s.stage) >= STAGE_ORDER.indexOf(phase.kind);
}

/** True while the campaign is in the phase itself (not before, not past it). */
export function inPhase(s: CampaignStatus, phase: Phase): boolean {
  if (phase.kind === 'step') return s.stage === 'train' && s.step === phase.step - 1;
  return s.stage === phase.kind;
}

export const statusLine = (s: CampaignStatus | undefined) =>
  s ? `stage ${s.stage}, step ${s.step} done${s.paused ? `, PAUSED (${s.pauseReason ?? 'no reason'})` : ''}` : '-';

export interface WaitOptions {
  /** Workers the suite stops on purpose right now: not restarted by the waiting loop. */
  heldDown?: () => ReadonlySet<WorkerKind>;
  /** The end counts only once this settles (a terminated campaign is resumed by the suite, not finished). */
  until?: Promise<unknown>;
}

/** A run's end, with the pauses the status query reported while it was waited on. */
export interface WaitedEnd extends RunEnd {
  pauses: string[];
}

export class CampaignDriver {
  private connection: Connection | undefined;
  private client: Client | undefined;

  constructor(
    private readonly env: Environment,
    private readonly tag: string,
    private readonly runTimeoutMs: number,
  ) {}

  log(msg: string): void {
    console.log(`[${this.tag} ${new Date().toISOString().slice(11, 19)}] ${msg}`);
  }

  tbt(...args: string[]): { ok: boolean; out: string; seconds: number } {
    const started = now();
    const r = spawnSync(path.join(repoRoot, 'bin', 'tbt'), args, {
      cwd: repoRoot,
      env: process.env,
      encoding: 'utf8',
      timeout: 300_000,
    });
    const out = `${r.stdout ?? ''}${r.stderr ?? ''}`.trim();
    return { ok: r.status === 0, out, seconds: secs(now() - started) };
  }

  /** `tbt up` and `tbt workers up`, or throws with their output. */
  stackUp(): void {
    for (const args of [['up'], ['workers', 'up']]) {
      const r = this.tbt(...args);
      if (!r.ok) throw new Error(`tbt ${args.join(' ')} failed:\n${r.out}`);
    }
  }

  async temporal(): Promise<Client> {
    if (!this.client) {
      this.connection = await connectTemporalClient(this.env, 3000);
      this.client = new Client({ connection: this.connection, namespace: this.env.TBT_TEMPORAL_NAMESPACE });
    }
    return this.client;
  }

  async close(): Promise<void> {
    const c = this.connection;
    this.connection = undefined;
    this.client = undefined;
    await c?.close().catch(() => undefined);
  }

  async status(id: string): Promise<CampaignStatus | undefined> {
    try {
      const client = await this.temporal();
      return await client.withDeadline(Date.now() + CALL_TIMEOUT_MS, () =>
        client.workflow.getHandle(id).query(statusQuery),
      );
    } catch {
      await this.close();
      return undefined;
    }
  }

  /** The status name of the chain's latest run, undefined when Temporal cannot be asked. */
  async describe(id: string): Promise<string | undefined> {
    try {
      const client = await this.temporal();
      return (await client.withDeadline(Date.now() + CALL_TIMEOUT_MS, () => client.workflow.getHandle(id).describe()))
        .status.name;
    } catch {
      await this.close();
      return undefined;
    }
  }

  async result(id: string): Promise<CampaignStatus | undefined> {
    return (await (
      await this.temporal()
    ).workflow
      .getHandle(id)
      .result()
      .catch(() => undefined)) as CampaignStatus | undefined;
  }

  /** Waits until the campaign is in or past the phase; false when its workflow closed or the run timed out first. */
  async waitForPhase(id: string, phase: Phase, started: number): Promise<boolean> {
    while (now() - started < this.runTimeoutMs) {
      const s = await this.status(id);
      if (s && reached(s, phase)) return true;
      const d = await this.describe(id);
      if (d && d !== 'RUNNING') return false;
      await sleep(1000);
    }
    return false;
  }

  /** Waits until the campaign's workflow chain ends; returns its final status name, result and pauses seen. */
  async waitForEnd(id: string, started: number, options: WaitOptions = {}): Promise<WaitedEnd> {
    const workerRestarts: string[] = [];
    const pauses: string[] = [];
    let settled = options.until === undefined;
    const settle = () => {
      settled = true;
    };
    void options.until?.then(settle, settle);
    let lastLine = '';
    let closedNoted = false;
    while (now() - started < this.runTimeoutMs) {
      const s = await this.describe(id);
      const closed = s !== undefined && s !== 'RUNNING' && s !== 'CONTINUED_AS_NEW';
      if (closed && !settled && !closedNoted) {
        this.log(`  ${id}: workflow ${s} while the suite is still acting on it`);
        closedNoted = true;
      }
      if (settled && closed) {
        const result = s === 'COMPLETED' ? await this.result(id) : undefined;
        return { status: s, result, workerRestarts, pauses };
      }
      const q = await this.status(id);
      const line = q ? `stage ${q.stage} step ${q.step}/${q.steps}` : `status unavailable (${s ?? 'no answer'})`;
      const paused = q?.paused ? `paused: ${q.pauseReason ?? 'no reason given'}` : '';
      if (paused && pauses.at(-1) !== paused) pauses.push(paused);
      if (`${line} ${paused}` !== lastLine) this.log(`  ${id}: ${line}${paused ? ` (${paused})` : ''}`);
      lastLine = `${line} ${paused}`;
      // A worker that died is a finding: note it, then bring it back so the run can end.
      const held = options.heldDown?.() ?? new Set<WorkerKind>();
      for (const kind of workerKinds.filter((k) => !held.has(k))) {
        if (workerPid(this.env, kind) === undefined) {
          this.log(`  WARNING: the ${kind} worker is not running; restarting it`);
          workerRestarts.push(`${kind}@${secs(now() - started)}s`);
          startWorkers(this.env, [kind]); // that one only: `tbt workers up` would also start the held-down ones
        }
      }
      await sleep(3000);
    }
    return { status: 'TIMED_OUT (hang?)', workerRestarts, pauses };
  }
}
