import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes.js';
import { parse } from 'yaml';
import { environmentSchema, repoRoot, searchAttributes, temporalAddress } from '../config/environment.ts';
import { setUpDeployment } from '../docker/setup.ts';
import { env } from './helpers/stack.ts';

/**
 * docker/compose.yaml and its Dockerfiles checked against the repository (no Docker engine runs here): every
 * file they name exists, every variable they pass is one the code or the image reads, images are pinned,
 * no secret is written down. The checker runs on a broken inline document too, so it is known to fail.
 */

const dockerDir = path.join(repoRoot, 'docker');

/** Variables third-party images read, per image (where each image documents it). */
const imageOwnedVariables: Record<string, Record<string, string>> = {
  postgres: {
    POSTGRES_USER: 'docker-library postgres: superuser created on first start',
    POSTGRES_PASSWORD: "docker-library postgres: that superuser's password",
    POSTGRES_DB: 'docker-library postgres: database created on first start',
  },
  'temporalio/auto-setup': {
    DB: 'auto-setup.sh: persistence plugin (postgres12)',
    DB_PORT: 'auto-setup.sh: persistence port',
    POSTGRES_SEEDS: 'auto-setup.sh / config template: Postgres host',
    POSTGRES_USER: 'auto-setup.sh / config template: Postgres user',
    POSTGRES_PWD: 'auto-setup.sh / config template: Postgres password',
    DYNAMIC_CONFIG_FILE_PATH: 'config template: dynamic config file, relative to /etc/temporal',
    SKIP_ADD_CUSTOM_SEARCH_ATTRIBUTES: 'auto-setup.sh: skip the Custom*Field test search attributes',
  },
  'temporalio/ui': {
    TEMPORAL_ADDRESS: 'Temporal UI server: frontend gRPC address',
  },
  'vllm/vllm-openai': {
    VLLM_API_KEY: 'vllm serve: bearer token required on requests (same as --api-key)',
    HF_HUB_OFFLINE: 'huggingface_hub: never download at run time',
    VLLM_ENFORCE_STRICT_TOOL_CALLING: 'vLLM >= 0.24: grammar-constrained tool calls (off for RL rollouts)',
  },
};

/** Variables our images take that no source line names: credentials an episode config points at with api_key_env. */
const credentialVariables: Record<string, string> = {
  TBT_POLICY_API_KEY: 'policy.api_key_env of production episode configs (rollout/policy-client.ts reads it by name)',
  OPENAI_API_KEY: 'judge/user api_key_env when they are API models (rollout/judge-client.ts, simulated-user)',
};

const sourceDirs = [
  ...['activities', 'cli', 'config', 'core', 'datasets', 'docker', 'infra', 'learner-control', 'rollout', 'sandbox'],
  ...['campaign-records', 'task-suites', 'workers', 'workflows', 'gpu-learner'],
];

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return ['tests', 'test', '__pycache__', 'node_modules'].includes(e.name) ? [] : sourceFiles(p);
    return /\.(ts|py)$/.test(e.name) ? [p] : [];
  });
}

/** Every variable a source file reads by name, plus the keys of the environment schema. */
function variablesReadByCode(): Set<string> {
  const names = new Set(Object.keys(environmentSchema.shape));
  const patterns = [
    /process\.env\.([A-Z][A-Z0-9_]*)/g,
    /process\.env\[\s*['"]([A-Z][A-Z0-9_]*)['"]\s*\]/g,
    /os\.environ(?:\.get|\.setdefault)?\s*[[(]\s*['"]([A-Z][A-Z0-9_]*)['"]/g,
    /os\.getenv\(\s*['"]([A-Z][A-Z0-9_]*)['"]/g,
  ];
  for (const file of sourceDirs.flatMap((d) => sourceFiles(path.join(repoRoot, d)))) {
    const text = fs.readFileSync(file, 'utf8');
    for (const re of patterns) for (const m of text.matchAll(re)) names.add(m[1]!);
  }
  return names;
}

/** Compose interpolation with every variable unset: `${X:-d}` -> d, `${X:?m}` -> <X>, `${X}` -> ''. */
function withDefaults(value: string): string {
  return value.replace(
    /\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}/g,
    (_m, name: string, op: string | undefined, arg: string | undefined) => {
      if (op === ':-' || op === '-') return arg ?? '';
      if (op === ':?' || op === '?') return `<${name}>`;
      return '';
    },
  );
}

const wholeSubstitution = /^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?[-?][^}]*)?\}$/;
const secretKey = /PASSWORD|PASSWD|PWD|SECRET|KEY|TOKEN/i;

function imageRepository(ref: string): string {
  const noDigest = ref.split('@')[0]!;
  const slash = noDigest.lastIndexOf('/');
  const colon = noDigest.lastIndexOf(':');
  return (colon > slash ? noDigest.slice(0, colon) : noDigest).replace(/^(docker\.io\/)?(library\/)?/, '');
}

/** Why an image reference is not pinned to an exact version, or undefined when it is. */
function unpinned(ref: string): string | undefined {
  if (ref.includes('@sha256:')) return undefined;
  const slash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  if (colon <= slash) return `image '${ref}' has no tag`;
  const tag = ref.slice(colon + 1);
  if (['latest', 'stable', 'main', 'nightly', 'edge'].includes(tag))
    return `image '${ref}' uses the moving tag '${tag}'`;
  if (!/^v?\d+\.\d+/.test(tag)) return `image '${ref}' is not pinned to an exact version (tag '${tag}')`;
  return undefined;
}

const repoFileToken = /^(?:\.\/)?(?!node_modules\/)[\w.-]+(?:\/[\w.-]+)+\.(?:ts|mts|js|mjs|cjs|py|sh|sql|ya?ml|json)$/;

function insideRepo(p: string): boolean {
  const rel = path.relative(repoRoot, p);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** Repo files an exec-form or shell-form command names (paths relative to the image's working dir, the repo root). */
function missingCommandFiles(command: unknown, where: string): string[] {
  const tokens = Array.isArray(command) ? command.map(String) : typeof command === 'string' ? command.split(/\s+/) : [];
  return tokens
    .map((t) => t.replace(/^\/app\//, ''))
    .filter((t) => repoFileToken.test(t) && !fs.existsSync(path.join(repoRoot, t)))
    .map((t) => `${where}: names ${t}, which is not in the repository`);
}

function gitIgnored(file: string): boolean {
  return spawnSync('git', ['check-ignore', '-q', file], { cwd: repoRoot }).status === 0;
}

/** Checks a Dockerfile's text: pinned glibc bases, COPY sources present in the build context, CMD/ENTRYPOINT files. */
function checkDockerfile(text: string, contextDir: string, where: string): string[] {
  const problems: string[] = [];
  const lines = text
    .replace(/\\\r?\n/g, ' ')
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const args = new Map<string, string>();
  const stages = new Set<string>();
  const expand = (s: string) => s.replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (_m, n: string) => args.get(n) ?? '');
  const checkImage = (ref: string) => {
    const why = unpinned(ref);
    if (why) problems.push(`${where}: ${why}`);
    if (/alpine/i.test(ref))
      problems.push(`${where}: base image '${ref}' is Alpine (musl); the Temporal core bridge is glibc-only`);
  };
  for (const line of lines) {
    const [instruction = '', ...rest] = line.split(/\s+/);
    const op = instruction.toUpperCase();
    if (op === 'ARG') {
      const [name, value] = rest.join(' ').split('=', 2);
      if (name && value !== undefined && !args.has(name)) args.set(name, value.replace(/^"|"$/g, ''));
    } else if (op === 'FROM') {
      const words = rest.filter((w) => !w.startsWith('--'));
      const ref = expand(words[0] ?? '');
      if (!stages.has(ref)) checkImage(ref);
      if (words[1]?.toUpperCase() === 'AS' && words[2]) stages.add(words[2]);
    } else if (op === 'COPY' || op === 'ADD') {
      const from = rest.find((w) => w.startsWith('--from='))?.slice('--from='.length);
      const paths = rest.filter((w) => !w.startsWith('--'));
      if (from !== undefined) {
        if (!stages.has(from) && /[:/]/.test(from)) checkImage(from);
        continue;
      }
      for (const src of paths.slice(0, -1)) {
        if (src === '.' || /[*?[]/.test(src) || /^https?:/.test(src)) continue;
        if (!fs.existsSync(path.join(contextDir, src)))
          problems.push(`${where}: ${op} source ${src} is not in the build context`);
      }
    } else if (op === 'CMD' || op === 'ENTRYPOINT') {
      const body = rest.join(' ');
      let command: unknown = body;
      try {
        command = JSON.parse(body);
      } catch {
        // shell form
      }
      problems.push(...missingCommandFiles(command, `${where} ${op}`));
    }
  }
  return problems;
}

/** Every violation in a compose document; `composeDir` is where its relative paths start. */
function checkCompose(doc: unknown, composeDir: string, readByCode: Set<string>): string[] {
  const problems: string[] = [];
  const top = (doc ?? {}) as { services?: Record<string, Record<string, unknown>>; volumes?: Record<string, unknown> };
  const services = top.services ?? {};
  if (Object.keys(services).length === 0) problems.push('no services');
  const declaredVolumes = new Set(Object.keys(top.volumes ?? {}));
  for (const [name, service] of Object.entries(services)) {
    const at = `service ${name}`;
    const build = service.build as string | { context?: string; dockerfile?: string } | undefined;
    const ours = build !== undefined;
    const image = typeof service.image === 'string' ? withDefaults(service.image) : undefined;
    if (!ours && !image) problems.push(`${at}: neither image nor build`);
    if (image) {
      const why = unpinned(image);
      if (why) problems.push(`${at}: ${why}`);
    }

    if (ours) {
      const context = path.resolve(composeDir, typeof build === 'string' ? build : (build.context ?? '.'));
      const dockerfile = path.resolve(
        context,
        typeof build === 'string' ? 'Dockerfile' : (build.dockerfile ?? 'Dockerfile'),
      );
      if (!insideRepo(context) || !fs.existsSync(context) || !fs.statSync(context).isDirectory())
        problems.push(
          `${at}: build context ${path.relative(repoRoot, context) || '.'} is not a folder of the repository`,
        );
      else if (!fs.existsSync(dockerfile))
        problems.push(`${at}: Dockerfile ${path.relative(repoRoot, dockerfile)} does not exist`);
      else
        problems.push(
          ...checkDockerfile(
            fs.readFileSync(dockerfile, 'utf8'),
            context,
            `${at} (${path.relative(repoRoot, dockerfile)})`,
          ),
        );
      problems.push(
        ...missingCommandFiles(service.command, `${at} command`),
        ...missingCommandFiles(service.entrypoint, `${at} entrypoint`),
      );
    }

    for (const volume of (service.volumes as unknown[] | undefined) ?? []) {
      const source =
        typeof volume === 'string' ? volume.split(':')[0]! : String((volume as { source?: unknown }).source ?? '');
      if (/^[.~/]/.test(source)) {
        const resolved = path.resolve(composeDir, withDefaults(source));
        if (insideRepo(resolved) && !fs.existsSync(resolved))
          problems.push(`${at}: volume source ${path.relative(repoRoot, resolved)} is not in the repository`);
      } else if (source && !declaredVolumes.has(source)) {
        problems.push(`${at}: named volume ${source} is not declared under volumes:`);
      }
    }

    const environment = service.environment ?? {};
    const entries: [string, unknown][] = Array.isArray(environment)
      ? environment.map((e) => {
          const s = String(e);
          const i = s.indexOf('=');
          return i < 0 ? [s, undefined] : [s.slice(0, i), s.slice(i + 1)];
        })
      : Object.entries(environment as Record<string, unknown>);
    const imageVariables = image ? imageOwnedVariables[imageRepository(image)] : undefined;
    for (const [key, value] of entries) {
      if (ours && !readByCode.has(key) && !(key in credentialVariables))
        problems.push(`${at}: environment ${key} is read nowhere in the code`);
      if (!ours && !(imageVariables && key in imageVariables))
        problems.push(
          `${at}: environment ${key} is not a variable image ${image} is known to read (add it to ` +
            `imageOwnedVariables with its source)`,
        );
      const text = value === undefined || value === null ? '' : String(value);
      if (secretKey.test(key) && value !== undefined && !wholeSubstitution.test(text))
        problems.push(`${at}: environment ${key} holds a literal secret; use \${VAR:?message}`);
      const urlPassword = /:\/\/[^/:@\s]+:([^@\s]+)@/.exec(text)?.[1];
      if (urlPassword && !wholeSubstitution.test(urlPassword))
        problems.push(`${at}: environment ${key} embeds a literal password in a URL`);
    }

    const envFiles =
      service.env_file === undefined ? [] : Array.isArray(service.env_file) ? service.env_file : [service.env_file];
    for (const f of envFiles) {
      const file = typeof f === 'string' ? f : String((f as { path?: unknown }).path);
      const resolved = path.resolve(composeDir, file);
      if (!insideRepo(resolved) || !gitIgnored(resolved))
        problems.push(`${at}: env_file ${file} is not git-ignored (secrets must never be committed)`);
    }

    const dependsOn = Array.isArray(service.depends_on)
      ? service.depends_on
      : Object.keys((service.depends_on as object | undefined) ?? {});
    for (const dep of dependsOn as string[])
      if (!(dep in services)) problems.push(`${at}: depends on unknown service ${dep}`);
  }
  return problems;
}

function loadCompose() {
  return parse(fs.readFileSync(path.join(dockerDir, 'compose.yaml'), 'utf8'), { merge: true }) as {
    services: Record<string, Record<string, any>>;
    volumes?: Record<string, unknown>;
  };
}

test(
  'docker/compose.yaml names only files that exist, variables the code or image reads, pinned images, no ' + 'secrets',
  () => {
    // TODO(lead): the gpu-worker service and docker/gpu-worker.Dockerfile start workers/gpu-worker.ts; this
    // fails with "names workers/gpu-worker.ts, which is not in the repository" until that entry point lands.
    assert.deepEqual(checkCompose(loadCompose(), dockerDir, variablesReadByCode()), []);
  },
);

test(
  'the compose file has the production shape: Temporal on Postgres, separate control database, scalable rollout ' +
    'workers, GPU profile',
  () => {
    const { services, volumes } = loadCompose();
    for (const name of [
      'temporal-db',
      'temporal',
      'temporal-ui',
      'control-db',
      'setup',
      'orchestrator-worker',
      'bookkeeping-worker',
      'rollout-worker',
      'gpu-worker',
      'policy-server',
    ])
      assert.ok(services[name], `service ${name}`);
    assert.match(services.temporal!.image, /^temporalio\/auto-setup:/);
    assert.equal(services.temporal!.environment.POSTGRES_SEEDS, 'temporal-db');
    assert.match(services['temporal-db']!.image, /^postgres:15\./);
    assert.match(services['temporal-ui']!.image, /^temporalio\/ui:/);
    assert.notDeepEqual(
      services['control-db']!.volumes,
      services['temporal-db']!.volumes,
      'the control database has its own server and volume',
    );
    assert.deepEqual(Object.keys(volumes ?? {}).sort(), [
      'control-db-data',
      'tbt-checkpoints',
      'tbt-models',
      'temporal-db-data',
      'typesense-data',
    ]);
    // The ThinkingBox bench servers' knowledge base; rollout workers forward 127.0.0.1:8108 to it.
    assert.match(services.typesense!.image, /^typesense\/typesense:30\./);
    assert.equal(services['rollout-worker']!.environment.TBT_TYPESENSE_ADDRESS, 'typesense:8108');

    const rollout = services['rollout-worker']!;
    assert.ok(Number.isInteger(rollout.deploy?.replicas) && rollout.deploy.replicas >= 1, 'deploy.replicas');
    assert.equal(rollout.container_name, undefined, 'a fixed container name would forbid --scale');
    assert.equal(rollout.ports, undefined, 'published ports would collide when scaled');
    for (const name of ['orchestrator-worker', 'bookkeeping-worker', 'rollout-worker', 'gpu-worker']) {
      assert.equal(
        services[name]!.depends_on?.setup?.condition,
        'service_completed_successfully',
        `${name} waits for setup`,
      );
    }
    assert.deepEqual(services.setup!.command, ['node', '--import', 'tsx', 'docker/setup.ts']);
    assert.equal(services.setup!.restart, 'no');

    for (const name of ['gpu-worker', 'policy-server']) {
      const s = services[name]!;
      assert.deepEqual(s.profiles, ['gpu'], `${name} profile`);
      const device = s.deploy?.resources?.reservations?.devices?.[0];
      assert.equal(device?.driver, 'nvidia', `${name} reserves an nvidia device`);
      assert.deepEqual(device?.capabilities, ['gpu']);
    }
    for (const name of Object.keys(services))
      if (!['gpu-worker', 'policy-server'].includes(name))
        assert.equal(services[name]!.profiles, undefined, `${name} runs without a profile`);

    const vllm = services['policy-server']!;
    assert.match(vllm.image, /^vllm\/vllm-openai:v\d+\.\d+\.\d+$/);
    const flags = (vllm.command as string[]).join(' ');
    for (const flag of [
      '--generation-config vllm',
      '--logprobs-mode raw_logprobs',
      '--max-model-len',
      '--served-model-name',
      '--seed 0',
    ])
      assert.ok(flags.includes(flag), `vLLM flag ${flag}`);
  },
);

test(
  'the Dockerfiles are glibc Node 20 and a CUDA torch base, and the secrets file compose reads is ' + 'git-ignored',
  () => {
    const worker = fs.readFileSync(path.join(dockerDir, 'worker.Dockerfile'), 'utf8');
    assert.match(worker, /^FROM node:20\.[\d.]+-bookworm-slim$/m);
    assert.match(worker, /npm ci/);
    const gpu = fs.readFileSync(path.join(dockerDir, 'gpu-worker.Dockerfile'), 'utf8');
    assert.match(gpu, /^ARG PYTORCH_IMAGE=pytorch\/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-runtime$/m);
    assert.match(gpu, /^ARG NODE_IMAGE=node:20\./m);
    assert.match(gpu, /grep -vE '\^torch/, 'the CPU torch pin of requirements.txt is left out');
    assert.match(gpu, /torch\.version\.cuda/, 'the build refuses a CPU torch');
    assert.ok(gitIgnored(path.join(dockerDir, '.env')), 'docker/.env is git-ignored');
    const example = fs.readFileSync(path.join(dockerDir, 'env.example'), 'utf8');
    const required = [
      ...fs.readFileSync(path.join(dockerDir, 'compose.yaml'), 'utf8').matchAll(/\$\{([A-Z0-9_]+):\?/g),
    ].map((m) => m[1]!);
    for (const name of new Set(required))
      assert.match(example, new RegExp(`^${name}=$`, 'm'), `env.example lists the required ${name} (empty)`);
  },
);

test('the checker reports every violation in a broken compose document and Dockerfile', () => {
  const bad = parse(`
services:
  bad-worker:
    build: { context: .., dockerfile: docker/missing.Dockerfile }
    image: tbt-worker:latest
    command: ["node", "--import", "tsx", "workers/no-such-worker.ts"]
    environment:
      TBT_NOT_READ_ANYWHERE: "1"
      TBT_AGENT_DB_PASSWORD: hunter2
      DATABASE_URL: postgres://tbt:hunter2@control-db:5432/tbt
    volumes:
      - ./no-such-config.yaml:/etc/tbt.yaml:ro
      - undeclared-volume:/data
    env_file: [prod.env]
    depends_on: [nowhere]
  untagged:
    image: postgres
    environment:
      POSTGRES_PASSWORD: literal-password
      NOT_AN_IMAGE_VARIABLE: "x"
  floating:
    image: postgres:15
  nocontext:
    build: ../no-such-folder
`);
  const problems = checkCompose(bad, dockerDir, variablesReadByCode());
  const expected = [
    "service bad-worker: image 'tbt-worker:latest' uses the moving tag 'latest'",
    'service bad-worker: Dockerfile docker/missing.Dockerfile does not exist',
    'service bad-worker command: names workers/no-such-worker.ts, which is not in the repository',
    'service bad-worker: environment TBT_NOT_READ_ANYWHERE is read nowhere in the code',
    'service bad-worker: environment TBT_AGENT_DB_PASSWORD holds a literal secret',
    'service bad-worker: environment DATABASE_URL embeds a literal password in a URL',
    'service bad-worker: volume source docker/no-such-config.yaml is not in the repository',
    'service bad-worker: named volume undeclared-volume is not declared',
    'service bad-worker: env_file prod.env is not git-ignored',
    'service bad-worker: depends on unknown service nowhere',
    "service untagged: image 'postgres' has no tag",
    'service untagged: environment POSTGRES_PASSWORD holds a literal secret',
    'service untagged: environment NOT_AN_IMAGE_VARIABLE is not a variable image postgres is known to read',
    "service floating: image 'postgres:15' is not pinned to an exact version",
    'service nocontext: build context no-such-folder is not a folder of the repository',
  ];
  for (const e of expected)
    assert.ok(
      problems.some((p) => p.startsWith(e)),
      `expected a violation starting with: ${e}\ngot:\n${problems.join('\n')}`,
    );
  assert.equal(problems.length, expected.length, `no unexpected violations:\n${problems.join('\n')}`);

  const dockerfile = checkDockerfile(
    'ARG BASE=node:20-alpine\nFROM ${BASE} AS deps\nFROM deps\nCOPY --from=deps /app /app\nCOPY no-such-file.txt ' +
      './\nCOPY . .\nCMD ["node", "workers/no-such-worker.ts"]\n',
    repoRoot,
    'Dockerfile',
  );
  assert.deepEqual(dockerfile, [
    "Dockerfile: image 'node:20-alpine' is not pinned to an exact version (tag '20-alpine')",
    "Dockerfile: base image 'node:20-alpine' is Alpine (musl); the Temporal core bridge is glibc-only",
    'Dockerfile: COPY source no-such-file.txt is not in the build context',
    'Dockerfile CMD: names workers/no-such-worker.ts, which is not in the repository',
  ]);
});

test('the setup entry point registers the namespace, search attributes and control database idempotently', async () => {
  const quiet = { info: () => undefined, warn: () => undefined };
  await setUpDeployment(env, quiet, 60_000);
  const again = await setUpDeployment(env, quiet, 60_000);
  assert.deepEqual(again, { namespaceCreated: false, searchAttributesAdded: [] });
  const connection = await Connection.connect({ address: temporalAddress(env) });
  try {
    const { customAttributes } = await connection.operatorService.listSearchAttributes({
      namespace: env.TBT_TEMPORAL_NAMESPACE,
    });
    for (const [name, type] of Object.entries(searchAttributes)) {
      assert.equal(
        customAttributes?.[name],
        encodeSearchAttributeIndexedValueType(type.toUpperCase() as 'KEYWORD' | 'INT'),
        name,
      );
    }
  } finally {
    await connection.close();
  }
});
