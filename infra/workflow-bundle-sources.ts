import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../config/environment.ts';

/**
 * What a workflow bundle is built from: the files reached from the workflows' entry through runtime imports, and
 * the versions of the packages they import. A pre-built bundle records this fingerprint beside it; a worker that
 * finds another fingerprint in its checkout knows the bundle is stale. Type-only imports are left out: they add
 * nothing to the bundle (workflows import activity and config types from files that change for other reasons).
 */

export interface WorkflowSourceFingerprint {
  /** sha256 over every file's path and content, and every package version. */
  hash: string;
  /** Absolute paths, sorted. */
  files: string[];
  /** sha256 of each file, keyed by its path relative to the tree's root (the entry's grandparent folder). */
  fileHashes: Record<string, string>;
  /** Version of each package the files import (`@temporalio/workflow` and the like). */
  packages: Record<string, string>;
}

// `import x from '...'`, `export { y } from '...'` and `import '...'`, over several lines; group 1 marks
// `import type` / `export type`, group 2 is the specifier.
const importPattern = /(?:^|[;\n])\s*(?:import|export)(\s+type\b)?(?:[^;'"]*?\sfrom\s*)?\s*['"]([^'"]+)['"]/g;

function sha256(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** The root package name of a bare specifier: `@temporalio/workflow/lib/x` -> `@temporalio/workflow`. */
function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/**
 * The version of the package `name` as Node would find it from `fromFile` (the nearest node_modules up the
 * folders), else from this checkout's: a tree outside the repository (a test's) still bundles with ours.
 */
function packageVersion(name: string, fromFile: string): string {
  for (const start of [path.dirname(fromFile), repoRoot])
    for (let dir = start; ; dir = path.dirname(dir)) {
      const manifest = path.join(dir, 'node_modules', name, 'package.json');
      if (fs.existsSync(manifest))
        return (JSON.parse(fs.readFileSync(manifest, 'utf8')) as { version: string }).version;
      if (path.dirname(dir) === dir) break;
    }
  return 'unresolved';
}

/** This repository writes `.ts` in its specifiers; a bare `./x` or a folder resolves as the bundler would. */
function resolveRelative(target: string): string | undefined {
  return [target, `${target}.ts`, path.join(target, 'index.ts')].find((f) =>
    fs.statSync(f, { throwIfNoEntry: false })?.isFile(),
  );
}

export function workflowSourceFingerprint(entry: string): WorkflowSourceFingerprint {
  const root = path.dirname(path.dirname(path.resolve(entry)));
  const seen = new Set<string>();
  const packages: Record<string, string> = {};
  const pending = [path.resolve(entry)];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(importPattern)) {
      const [, typeOnly, specifier] = m;
      if (typeOnly || !specifier || specifier.startsWith('node:')) continue;
      if (specifier.startsWith('.') || path.isAbsolute(specifier)) {
        const target = resolveRelative(path.resolve(path.dirname(file), specifier));
        if (target) pending.push(target);
      } else packages[packageName(specifier)] ??= packageVersion(packageName(specifier), file);
    }
  }
  const files = [...seen].sort();
  const fileHashes = Object.fromEntries(files.map((f) => [path.relative(root, f), sha256(fs.readFileSync(f))]));
  const sortedPackages = Object.fromEntries(Object.entries(packages).sort(([a], [b]) => a.localeCompare(b)));
  const hash = sha256(JSON.stringify({ files: fileHashes, packages: sortedPackages }));
  return { hash, files, fileHashes, packages: sortedPackages };
}
