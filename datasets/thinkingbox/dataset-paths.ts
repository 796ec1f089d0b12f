import fs from 'node:fs';
import path from 'node:path';
import type { TaskFileProblem } from '../../config/yaml-file.ts';
import { BadInputError } from '../../core/errors.ts';

/**
 * Paths a dataset names (servers.yaml `cwd`, test-list entries, the files the importer reads, server packages),
 * resolved with every symbolic link followed and required to stay inside the dataset folder they belong to.
 * The importer reads these files on the host and the sandbox bind-mounts these folders: `cwd: /`, a `..` list
 * entry or a link to /etc would otherwise show the host's files to dataset code, or put them into the suite.
 * The importer stores the resolved path, so a run can check cheaply that nothing changed since (`unchangedPath`).
 */

/** Where a dataset value was read (file, field, line): a problem names it. */
export type ValueSource = Omit<TaskFileProblem, 'message'>;

export type ContainedPath = { path: string; problem?: undefined } | { path?: undefined; problem: TaskFileProblem };

/** `child` is `parent` or lies below it (both absolute and resolved). */
export function isInside(child: string, parent: string): boolean {
  const rel = path.relative(parent, child);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

function isLink(p: string): boolean {
  try {
    return fs.lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/**
 * The real path of `p` (absolute, every link followed); parts that do not exist yet are appended to the real
 * path of their deepest existing folder. Undefined for a link that points nowhere (where it would lead is
 * not known until something is created there).
 */
function realPath(p: string): string | undefined {
  const missing: string[] = [];
  for (let at = path.resolve(p); ; at = path.dirname(at)) {
    try {
      return path.join(fs.realpathSync(at), ...missing);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || at === path.dirname(at)) return undefined;
      if (isLink(at)) return undefined;
      missing.unshift(path.basename(at));
    }
  }
}

/**
 * `value` (relative to `root`, or absolute) resolved, links included, when it stays inside `root`; otherwise a
 * problem at `where`. The returned path is the resolved one: use it, not `value`, from then on.
 */
export function containedPath(root: string, value: string, where: ValueSource): ContainedPath {
  const problem = (message: string): ContainedPath => ({ problem: { ...where, message } });
  if (value.includes('\0')) return problem(`'${value.replaceAll('\0', '\\0')}' holds a NUL character`);
  const realRoot = realPath(root);
  const resolved = realPath(path.resolve(root, value));
  if (!realRoot) return problem(`the dataset folder ${root} does not resolve (a link that points nowhere)`);
  if (!resolved) return problem(`'${value}' is or passes a symbolic link that points nowhere`);
  if (!isInside(resolved, realRoot))
    return problem(`'${value}' resolves to ${resolved}, outside the dataset folder ${realRoot} (links followed)`);
  return { path: resolved };
}

/** Where the link at `link` leads: its real path, else (it points nowhere) its target taken as written. */
function linkTarget(link: string): string {
  try {
    return fs.realpathSync(link);
  } catch {
    return path.resolve(fs.realpathSync(path.dirname(link)), fs.readlinkSync(link));
  }
}

/**
 * Every symbolic link under `root` that leads outside it (or points nowhere outside it), as a problem naming the
 * link. Linked folders are not entered: the link itself is checked.
 */
export function outwardLinks(root: string): TaskFileProblem[] {
  const realRoot = realPath(root);
  if (!realRoot || !fs.existsSync(realRoot)) return [];
  const problems: TaskFileProblem[] = [];
  const folders = [root];
  for (let dir = folders.pop(); dir !== undefined; dir = folders.pop()) {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) folders.push(full);
      if (!entry.isSymbolicLink()) continue;
      const target = linkTarget(full);
      if (!isInside(target, realRoot))
        problems.push({
          file: full,
          line: 1,
          field: '',
          message: `symbolic link to ${target}, outside the dataset folder ${realRoot}: dataset code would see it`,
        });
    }
  }
  return problems.sort((a, b) => a.file.localeCompare(b.file));
}

/**
 * At run time, before a stored path is read or mounted: it must still resolve to itself (the importer stored it
 * resolved and contained), so a link put into the dataset since the import is refused. One `realpath` call.
 */
export function unchangedPath(p: string, what: string): string {
  let real: string;
  try {
    real = fs.realpathSync(p);
  } catch {
    throw new BadInputError(`${what}: ${p} does not exist (re-run tbt tasks import-thinkingbox)`);
  }
  if (real !== p)
    throw new BadInputError(
      `${what}: ${p} now resolves to ${real}, not the path the import checked (a link was put into the ` +
        'dataset since): re-run tbt tasks import-thinkingbox',
    );
  return p;
}
