import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse } from 'yaml';
import { repoRoot } from '../config/environment.ts';

/**
 * After the compose stack of scripts/deploy-test.sh ran, whether every container of the project ran with what
 * docker/compose.yaml says, read from the YAML (interpolated with the test's env file, as compose does) and from
 * `podman inspect` and each container's OCI runtime config: its volumes and bind mounts (exactly those, with their
 * read-only flags), its user, its capabilities (nothing added, not privileged, all dropped where `cap_drop: [ALL]`),
 * no_new_privs, the seccomp profile (the filter the runtime got, syscall by syscall, against the profile's file; the
 * engine's default where compose names none) and /proc's masks (`systempaths=unconfined`). Also that the test's
 * compose override holds nothing but what this machine needs (the GPU worker's ulimits and its GPU reservation
 * reset), and that its env file sets only variables compose.yaml reads.
 *
 *   tsx scripts/deploy-compose-match.ts PROJECT ENV_FILE OVERRIDE_FILE
 *
 * Prints `compose-match: SERVICE=N ...` (containers checked per service); exits 1 listing every difference.
 */

const composeDir = path.join(repoRoot, 'docker');
type Service = Record<string, unknown> & {
  volumes?: string[];
  user?: string;
  cap_add?: string[];
  cap_drop?: string[];
  security_opt?: string[];
  init?: boolean;
};

/** Compose's interpolation: ${X}, ${X:-default}, ${X-default}, ${X:?error}, ${X?error}; `$$` is a `$`. */
export function interpolate(text: string, vars: Record<string, string>): string {
  return text.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\}/g, (all, name, colon, op, arg) => {
    if (all === '$$') return '$';
    const value = vars[name as string];
    const unset = value === undefined || (colon === ':' && value === '');
    if (!unset) return value!;
    if (op === '?') throw new Error(`compose.yaml: ${name}: ${arg}`);
    return op === '-' ? (arg as string) : '';
  });
}

/** Every string in a parsed YAML value, interpolated. */
function interpolated(value: unknown, vars: Record<string, string>): unknown {
  if (typeof value === 'string') return interpolate(value, vars);
  if (Array.isArray(value)) return value.map((v) => interpolated(v, vars));
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolated(v, vars)]));
  return value;
}

function readEnvFile(file: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) vars[m[1]!] = m[2]!;
  }
  return vars;
}

const podman = (...args: string[]) => execFileSync('podman', args, { encoding: 'utf8', maxBuffer: 64 << 20 });

interface Inspect {
  Name: string;
  Config: { User: string; Labels: Record<string, string> };
  ImageName: string;
  Mounts: { Type: string; Name?: string; Source: string; Destination: string; RW: boolean }[];
  HostConfig: { Privileged: boolean; CapAdd: string[] | null; SecurityOpt: string[] | null };
  EffectiveCaps: string[] | null;
  OCIConfigPath?: string;
}

/** What compose leaves to the image: its user, and the folders its VOLUME lines make anonymous volumes of. */
interface ImageFacts {
  user: string;
  volumes: string[];
}

function imageFacts(image: string): ImageFacts {
  const config = JSON.parse(podman('image', 'inspect', '--format', '{{json .Config}}', image)) as {
    User?: string;
    Volumes?: Record<string, unknown> | null;
  };
  return { user: config.User ?? '', volumes: Object.keys(config.Volumes ?? {}) };
}

interface OciConfig {
  linux?: {
    seccomp?: { defaultAction: string; syscalls?: { names: string[]; action: string }[] };
    maskedPaths?: string[];
  };
  process?: { noNewPrivileges?: boolean };
}

interface SeccompRule {
  names: string[];
  action: string;
  includes?: { arches?: string[]; caps?: string[]; minKernel?: string };
  excludes?: { arches?: string[]; caps?: string[] };
}

/**
 * The syscalls a Docker-format profile lets through on x86-64 for a container holding `caps`: what the runtime's
 * filter must allow if the engine applied that profile (rules for other architectures or missing capabilities drop
 * out, as the engine drops them).
 */
export function allowedByProfile(file: string, caps: Set<string>): Set<string> {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as { syscalls: SeccompRule[] };
  const arch = (arches?: string[]) => !arches || arches.some((a) => ['amd64', 'x86_64'].includes(a));
  const allowed = new Set<string>();
  for (const rule of profile.syscalls) {
    if (rule.action !== 'SCMP_ACT_ALLOW') continue;
    if (!arch(rule.includes?.arches) || (rule.excludes?.arches && arch(rule.excludes.arches))) continue;
    if (rule.includes?.caps && !rule.includes.caps.every((c) => caps.has(c))) continue;
    if (rule.excludes?.caps?.some((c) => caps.has(c))) continue;
    for (const name of rule.names) allowed.add(name);
  }
  return allowed;
}

const allowedByRuntime = (oci: OciConfig) =>
  new Set((oci.linux?.seccomp?.syscalls ?? []).filter((r) => r.action === 'SCMP_ACT_ALLOW').flatMap((r) => r.names));

function setDiff(a: Set<string>, b: Set<string>): string[] {
  return [...a].filter((x) => !b.has(x)).sort();
}

/** `key=value` / `key:value` security options as a map (no-new-privileges alone means true). */
function securityOptions(list: string[]): Map<string, string> {
  return new Map(
    list.map((o) => {
      const m = /^([a-z-]+)[=:]?(.*)$/.exec(o)!;
      return [m[1]!, m[2] || 'true'];
    }),
  );
}

/** The differences of one container from its service. */
function containerProblems(project: string, service: Service, c: Inspect, image: ImageFacts): string[] {
  const out: string[] = [];
  const where = `${c.Name}`;
  // Volumes: each compose entry, and nothing else but the anonymous volumes of the image's own VOLUME lines.
  const want = (service.volumes ?? []).map((v) => {
    const [source, target, mode] = v.split(':');
    const bind = source!.startsWith('.') || source!.startsWith('/');
    const from = bind ? path.resolve(composeDir, source!) : `${project}_${source}`;
    return `${bind ? 'bind' : 'volume'} ${from} -> ${target} ${mode === 'ro' ? 'ro' : 'rw'}`;
  });
  const anonymous = (m: Inspect['Mounts'][number]) =>
    m.Type === 'volume' && !m.Name?.startsWith(`${project}_`) && image.volumes.includes(m.Destination);
  // `init: true`: the engine mounts its init (catatonit) there.
  const init = (m: Inspect['Mounts'][number]) => service.init === true && m.Destination === '/run/podman-init';
  const have = c.Mounts.filter((m) => !anonymous(m) && !init(m)).map(
    (m) => `${m.Type} ${m.Type === 'volume' ? m.Name : m.Source} -> ${m.Destination} ${m.RW ? 'rw' : 'ro'}`,
  );
  const extra = have.filter((h) => !want.includes(h));
  const missing = want.filter((w) => !have.includes(w));
  if (extra.length || missing.length)
    out.push(`${where}: mounts differ: not in compose [${extra.join('; ')}], missing [${missing.join('; ')}]`);
  const user = service.user ?? image.user;
  if (c.Config.User !== user)
    out.push(`${where}: user ${c.Config.User || '(none)'}, compose says ${user || '(image)'}`);
  if (c.HostConfig.Privileged) out.push(`${where}: privileged`);
  const added = (c.HostConfig.CapAdd ?? []).filter((x) => !(service.cap_add ?? []).includes(x));
  if (added.length) out.push(`${where}: capabilities added: ${added.join(', ')}`);
  const dropAll = (service.cap_drop ?? []).includes('ALL');
  const caps = new Set(c.EffectiveCaps ?? []);
  if (dropAll && caps.size) out.push(`${where}: cap_drop [ALL] but holds ${[...caps].join(', ')}`);
  // Security options, checked where they take effect: the OCI config the runtime started the container with.
  const opts = securityOptions(service.security_opt ?? []);
  const oci = c.OCIConfigPath ? (JSON.parse(fs.readFileSync(c.OCIConfigPath, 'utf8')) as OciConfig) : undefined;
  if (!oci) return [...out, `${where}: no OCI config to read (podman inspect gives no OCIConfigPath)`];
  const nnp = oci.process?.noNewPrivileges === true;
  if (nnp !== (opts.get('no-new-privileges') === 'true'))
    out.push(`${where}: no_new_privs ${nnp}, compose says ${opts.get('no-new-privileges') ?? 'nothing'}`);
  const seccomp = oci.linux?.seccomp;
  const profile = opts.get('seccomp');
  if (!seccomp || seccomp.defaultAction === 'SCMP_ACT_ALLOW') out.push(`${where}: runs without a seccomp filter`);
  else if (profile) {
    const wantSys = allowedByProfile(path.resolve(composeDir, profile), caps);
    const haveSys = allowedByRuntime(oci);
    const more = setDiff(haveSys, wantSys);
    const fewer = setDiff(wantSys, haveSys);
    if (more.length || fewer.length)
      out.push(`${where}: seccomp filter is not ${profile}: also allows [${more}], not [${fewer}]`);
  } else if ((c.HostConfig.SecurityOpt ?? []).some((o) => /^seccomp[=:]/.test(o)))
    out.push(`${where}: a seccomp profile compose does not name: ${c.HostConfig.SecurityOpt}`);
  const masked = (oci.linux?.maskedPaths ?? []).length > 0;
  if (masked === (opts.get('systempaths') === 'unconfined'))
    out.push(`${where}: /proc masks ${masked ? 'on' : 'off'}, compose says systempaths=${opts.get('systempaths')}`);
  return out;
}

/** The override may change only what this machine lacks: the GPU worker's ulimits and its GPU reservation. */
export function overrideProblems(file: string): string[] {
  const doc = parse(fs.readFileSync(file, 'utf8').replace(/!reset\s/g, ''), { merge: true }) as {
    services?: Record<string, Record<string, unknown>>;
  };
  const out: string[] = [];
  for (const [name, svc] of Object.entries(doc.services ?? {}))
    for (const key of Object.keys(svc))
      if (name !== 'gpu-worker' || !['ulimits', 'deploy'].includes(key)) out.push(`override: ${name}.${key}`);
  return out;
}

function run(): void {
  const [project, envFile, overrideFile] = process.argv.slice(2);
  if (!project || !envFile || !overrideFile)
    throw new Error('usage: deploy-compose-match.ts PROJECT ENV_FILE OVERRIDE_FILE');
  const vars = readEnvFile(envFile);
  const raw = fs.readFileSync(path.join(composeDir, 'compose.yaml'), 'utf8');
  const problems = [...overrideProblems(overrideFile)];
  for (const name of Object.keys(vars))
    if (!raw.includes(`\${${name}`)) problems.push(`env file: ${name} is no variable of compose.yaml`);
  // Interpolated after parsing (comments may hold `${...}` examples), value by value as compose does.
  const doc = parse(raw, { merge: true }) as { services: Record<string, Service> };
  const services = interpolated(doc.services, vars) as Record<string, Service>;
  const ids = podman('ps', '-a', '-q', '--filter', `label=io.podman.compose.project=${project}`).split('\n');
  const containers = JSON.parse(podman('inspect', ...ids.filter(Boolean))) as Inspect[];
  const counts = new Map<string, number>();
  const images = new Map<string, ImageFacts>();
  for (const c of containers) {
    const name = c.Config.Labels['io.podman.compose.service']!;
    const service = services[name];
    if (!service) {
      problems.push(`${c.Name}: service ${name} is not in compose.yaml`);
      continue;
    }
    if (!images.has(c.ImageName)) images.set(c.ImageName, imageFacts(c.ImageName));
    problems.push(...containerProblems(project, service, c, images.get(c.ImageName)!));
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  const line = Object.keys(services).map((s) => `${s}=${counts.get(s) ?? 0}`);
  if (problems.length) throw new Error(`compose-match: ${problems.length} difference(s):\n  ${problems.join('\n  ')}`);
  console.log(`compose-match: ${line.join(' ')}`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    run();
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  }
}
