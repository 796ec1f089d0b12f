import { hostPythonSync } from './host-python.ts';
import { BadInputError } from '../../core/errors.ts';

/**
 * The requirements a dataset's server packages declare (`[project].dependencies` of each pyproject.toml), each
 * checked to be a PEP 508 requirement before anything installs it: a name, extras, version specifiers and
 * markers, never a pip option (`--index-url ...`, `-e .`), a path, or a URL unless the operator allowed URLs.
 *
 * Parsed by PyPA's `packaging` (`Requirement`), the parser pip itself uses, so what we check is what pip reads:
 * a parser of our own could disagree with pip on some string, and that gap would be the way through. pip is
 * then given packaging's canonical form of each requirement, never the dataset's text. Only data is parsed
 * here (TOML and requirement strings); no dataset code runs.
 */

export interface DeclaredRequirement {
  /** The canonical form (packaging's `str(Requirement)`): what pip is given. */
  requirement: string;
  /** The project name as declared (pip's `--no-binary` takes it). */
  name: string;
  /** A direct reference (`name @ URL`), when there is one. */
  url?: string;
  file: string;
  line: number;
}

export interface RequirementPolicy {
  /** `name @ https://...` allowed (`--allow-urls`). */
  allowUrls: boolean;
  /** Whether a URL may name an sdist (one that is not a `.whl`), i.e. sdists are allowed at all. */
  allowSourceUrls: boolean;
}

const PARSE_SCRIPT = String.raw`
import json, sys, tomllib
try:
    from packaging.requirements import InvalidRequirement, Requirement
except ImportError:  # pip vendors the same library
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
out = []
for package in json.load(sys.stdin):
    path = package + "/pyproject.toml"
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    lines = text.splitlines()
    def line_of(needle, default=1):
        return next((i + 1 for i, l in enumerate(lines) if needle in l), default)
    try:
        deps = tomllib.loads(text).get("project", {}).get("dependencies", [])
    except tomllib.TOMLDecodeError as err:
        out.append({"file": path, "line": 1, "error": f"not valid TOML: {err}"})
        continue
    deps_line = line_of("dependencies")
    if not isinstance(deps, list) or not all(isinstance(x, str) for x in deps):
        out.append({"file": path, "line": deps_line, "error": "project.dependencies must be a list of strings"})
        continue
    for text_req in deps:
        line = line_of(json.dumps(text_req)[1:-1], deps_line)
        entry = {"file": path, "line": line, "text": text_req}
        try:
            r = Requirement(text_req)
        except InvalidRequirement as err:
            entry["error"] = str(err).splitlines()[0]
        else:
            entry.update(name=r.name, url=r.url, canonical=str(r))
        out.append(entry)
print(json.dumps(out))
`;

interface ParsedEntry {
  file: string;
  line: number;
  text?: string;
  error?: string;
  name?: string;
  url?: string | null;
  canonical?: string;
}

/** Why a direct reference is refused under `policy`, or undefined when it is allowed. */
export function urlProblem(url: string, policy: RequirementPolicy): string | undefined {
  if (!policy.allowUrls) return 'names a URL (a direct reference); pass --allow-urls to allow https URLs';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `names '${url}', which is not a URL`;
  }
  // file: would name a path on this host, git+ a checkout (built from source); only plain https downloads.
  if (parsed.protocol !== 'https:') return `names a ${parsed.protocol} URL; only https URLs are allowed`;
  if (parsed.username || parsed.password) return 'names a URL with credentials in it';
  if (!policy.allowSourceUrls && !parsed.pathname.endsWith('.whl'))
    return 'names a URL that is not a wheel (.whl); sdists are built from source: pass --allow-sdist NAME';
  return undefined;
}

/**
 * Every declared requirement of `packages`, validated; the first bad one is a BadInputError naming the
 * pyproject.toml and the line (`python` needs Python 3.11+ for tomllib, and packaging or pip).
 */
export function readDeclaredRequirements(
  packages: string[],
  policy: RequirementPolicy,
  python?: string,
): DeclaredRequirement[] {
  if (packages.length === 0) return [];
  const run = hostPythonSync(['-c', PARSE_SCRIPT], {
    input: JSON.stringify(packages),
    timeoutMs: 60_000,
    ...(python ? { python } : {}),
  });
  if (run.status !== 0)
    throw new BadInputError(`cannot read the server packages' requirements: ${(run.stderr || '').trim().slice(-800)}`);
  const entries = JSON.parse(run.stdout) as ParsedEntry[];
  const seen = new Map<string, DeclaredRequirement>();
  for (const e of entries) {
    const where = `${e.file}:${e.line}`;
    if (e.error)
      throw new BadInputError(
        `${where}: project.dependencies: ${
          e.text === undefined
            ? ''
            : `${JSON.stringify(e.text)} is not a PEP 508 ` +
              'requirement (a name with optional extras, version specifiers and markers; no pip options): '
        }${e.error}`,
      );
    const problem = e.url ? urlProblem(e.url, policy) : undefined;
    if (problem) throw new BadInputError(`${where}: project.dependencies: ${JSON.stringify(e.text)} ${problem}`);
    if (!seen.has(e.canonical!))
      seen.set(e.canonical!, {
        requirement: e.canonical!,
        name: e.name!,
        ...(e.url ? { url: e.url } : {}),
        file: e.file,
        line: e.line,
      });
  }
  return [...seen.values()].sort((a, b) => a.requirement.localeCompare(b.requirement));
}

/** A project name as `--allow-sdist` takes it (PEP 508's name rule), or `:all:`. */
export function isProjectName(text: string): boolean {
  return text === ':all:' || /^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$/i.test(text);
}
