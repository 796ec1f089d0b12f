import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import type pino from 'pino';
import { repoRoot } from '../config/environment.ts';
import { workflowSourceFingerprint } from './workflow-bundle-sources.ts';

/**
 * The pre-built workflow bundle: the code the orchestrator worker runs, built once (`npm run build:workflows`)
 * into `workflow-bundle.js`, with `workflow-bundle.json` beside it naming its build id (a hash of the code) and
 * the fingerprint of the sources it was built from. A worker uses it only while its checkout still has those
 * sources; otherwise it builds the bundle at start, as it always did. The build id is what a deploy compares
 * (`tbt workflows replay-check` prints it) and what Worker Deployment Versioning would name the version by.
 */

export const workflowsEntry = path.join(repoRoot, 'workflows', 'index.ts');
/** Under `out/`: ignored by git and by the image's build context, so a host's bundle never enters an image. */
export const defaultWorkflowBundleDir = path.join(repoRoot, 'out', 'workflow-bundle');

const codeFile = 'workflow-bundle.js';
const manifestFile = 'workflow-bundle.json';

export interface WorkflowBundleManifest {
  buildId: string;
  /** workflowSourceFingerprint's hash of the sources the code was built from. */
  sourceHash: string;
  fileHashes: Record<string, string>;
  packages: Record<string, string>;
  builtAt: string;
}

export type PrebuiltWorkflowBundle =
  | { state: 'fresh'; codePath: string; manifest: WorkflowBundleManifest }
  | { state: 'missing' | 'stale'; reason: string };

/** The build id of a bundle: the first 16 hex digits of its code's sha256. */
export function workflowBundleBuildId(code: string | Buffer): string {
  return createHash('sha256').update(code).digest('hex').slice(0, 16);
}

function writeAtomically(file: string, data: string): void {
  const temporary = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temporary, data);
  fs.renameSync(temporary, file);
}

/** Writes the code and its manifest (fingerprint of `entry`'s sources now); the manifest goes last. */
export function writeWorkflowBundle(dir: string, code: string, entry = workflowsEntry): WorkflowBundleManifest {
  const sources = workflowSourceFingerprint(entry);
  const manifest: WorkflowBundleManifest = {
    buildId: workflowBundleBuildId(code),
    sourceHash: sources.hash,
    fileHashes: sources.fileHashes,
    packages: sources.packages,
    builtAt: new Date().toISOString(),
  };
  fs.mkdirSync(dir, { recursive: true });
  writeAtomically(path.join(dir, codeFile), code);
  writeAtomically(path.join(dir, manifestFile), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

/** What differs between the recorded sources and today's, for the stale reason. */
function sourceChanges(recorded: WorkflowBundleManifest, entry: string): string {
  const now = workflowSourceFingerprint(entry);
  const names = new Set([...Object.keys(recorded.fileHashes ?? {}), ...Object.keys(now.fileHashes)]);
  const files = [...names].filter((f) => recorded.fileHashes?.[f] !== now.fileHashes[f]).sort();
  const packages = Object.keys({ ...recorded.packages, ...now.packages }).filter(
    (p) => recorded.packages?.[p] !== now.packages[p],
  );
  const changed = [...files, ...packages.map((p) => `${p}@${now.packages[p] ?? 'removed'}`)];
  const shown = changed.slice(0, 5).join(', ') + (changed.length > 5 ? ` and ${changed.length - 5} more` : '');
  return `sources changed since it was built: ${shown || 'the fingerprint'}`;
}

/** The bundle in `dir`, if it exists, is whole and was built from `entry`'s sources as they are now. */
export function prebuiltWorkflowBundle(dir: string, entry = workflowsEntry): PrebuiltWorkflowBundle {
  const codePath = path.join(dir, codeFile);
  let manifest: WorkflowBundleManifest;
  let code: Buffer;
  try {
    manifest = JSON.parse(fs.readFileSync(path.join(dir, manifestFile), 'utf8')) as WorkflowBundleManifest;
    code = fs.readFileSync(codePath);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'missing', reason: `no bundle in ${dir}` };
    return { state: 'stale', reason: `unreadable bundle in ${dir}: ${(err as Error).message}` };
  }
  if (workflowBundleBuildId(code) !== manifest.buildId)
    return { state: 'stale', reason: `${codePath} does not match its build id ${manifest.buildId}` };
  if (workflowSourceFingerprint(entry).hash !== manifest.sourceHash)
    return { state: 'stale', reason: sourceChanges(manifest, entry) };
  return { state: 'fresh', codePath, manifest };
}

/** Bundles `entry` in memory; webpack's own chatter goes to `logger` at debug level. */
export async function buildWorkflowBundle(
  entry = workflowsEntry,
  logger?: pino.Logger,
): Promise<{ code: string; buildId: string }> {
  // Without a logger, webpack's errors still reach stderr: the error thrown only says that there were some.
  const quiet = (level: 'debug' | 'warn' | 'error') => (message: string, meta?: object) =>
    logger ? logger[level]({ ...meta }, message) : level === 'error' && console.error(message, meta ?? '');
  const { code } = await bundleWorkflowCode({
    workflowsPath: entry,
    logger: {
      log: (_level, message, meta) => quiet('debug')(message, meta),
      trace: quiet('debug'),
      debug: quiet('debug'),
      info: quiet('debug'),
      warn: quiet('warn'),
      error: quiet('error'),
    },
  });
  return { code, buildId: workflowBundleBuildId(code) };
}

/** The bundle a worker runs: the pre-built one when it is fresh, else one built now. */
export async function workerWorkflowBundle(
  logger: pino.Logger,
  dir = defaultWorkflowBundleDir,
  entry = workflowsEntry,
): Promise<{ workflowBundle: { codePath: string } | { code: string }; buildId: string; prebuilt: boolean }> {
  const found = prebuiltWorkflowBundle(dir, entry);
  if (found.state === 'fresh') {
    logger.info({ buildId: found.manifest.buildId, codePath: found.codePath }, 'workflow bundle: pre-built');
    return { workflowBundle: { codePath: found.codePath }, buildId: found.manifest.buildId, prebuilt: true };
  }
  logger.info({ reason: found.reason }, 'workflow bundle: building it now (npm run build:workflows pre-builds it)');
  const { code, buildId } = await buildWorkflowBundle(entry, logger);
  logger.info({ buildId }, 'workflow bundle: built');
  return { workflowBundle: { code }, buildId, prebuilt: false };
}
