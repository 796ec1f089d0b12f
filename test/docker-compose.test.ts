import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes.js';
import { parse } from 'yaml';
import { environmentSchema, repoRoot, searchAttributes, temporalAddress } from '../config/environment.ts';
import { setupEnvironmentSchema } from '../docker/control-db-admin.ts';
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
  const names = new Set([...Object.keys(environmentSchema.shape), ...Object.keys(setupEnvironmentSchema.shape)]);
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
    // Third-party images are `${TBT_..._IMAGE:-official}` (registry mirrors, stand-ins in scripts/deploy-test.sh).
    const image = (name: string) => withDefaults(services[name]!.image);
    assert.match(image('temporal'), /^temporalio\/auto-setup:/);
    assert.equal(services.temporal!.environment.POSTGRES_SEEDS, 'temporal-db');
    assert.match(image('temporal-db'), /^postgres:15\./);
    assert.match(image('temporal-ui'), /^temporalio\/ui:/);
    assert.notDeepEqual(
      services['control-db']!.volumes,
      services['temporal-db']!.volumes,
      'the control database has its own server and volume',
    );
    assert.deepEqual(Object.keys(volumes ?? {}).sort(), [
      'control-db-data',
      'tbt-checkpoints',
      'tbt-datasets',
      'tbt-models',
      'tbt-state',
      'temporal-db-data',
      'typesense-data',
    ]);
    // The ThinkingBox bench servers' knowledge base; the sandbox's loopback relay connects 127.0.0.1:8108 to it.
    assert.match(image('typesense'), /^typesense\/typesense:30\./);
    assert.equal(withDefaults(services['rollout-worker']!.environment.TBT_SANDBOX_LOOPBACK), '8108=typesense:8108');

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
      if (!['gpu-worker', 'policy-server', 'tbt'].includes(name))
        assert.equal(services[name]!.profiles, undefined, `${name} runs without a profile`);

    const vllm = services['policy-server']!;
    assert.match(image('policy-server'), /^vllm\/vllm-openai:v\d+\.\d+\.\d+$/);
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
    // Bases are build arguments whose defaults are the official images (scripts/build-images.sh passes local ones).
    assert.match(worker, /^ARG NODE_IMAGE=node:20\.[\d.]+-bookworm-slim$/m);
    assert.match(worker, /^FROM \$\{NODE_IMAGE\}$/m);
    assert.match(worker, /npm ci/);
    const gpu = fs.readFileSync(path.join(dockerDir, 'gpu-worker.Dockerfile'), 'utf8');
    assert.match(gpu, /^ARG PYTORCH_IMAGE=pytorch\/pytorch:[\d.]+-cuda[\d.]+-cudnn\d+-runtime$/m);
    assert.match(gpu, /^ARG NODE_IMAGE=node:20\./m);
    assert.match(gpu, /grep -vE '\^torch/, 'the CPU torch pin of requirements.txt is left out');
    assert.match(gpu, /torch\.version\.cuda/, 'the build refuses a CPU torch');
    assert.match(gpu, /^ARG TORCH_BUILD=cuda$/m, 'unless TORCH_BUILD=cpu asks for one (a test build)');
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

/** The image's non-root user: the last USER line of the worker Dockerfile, as uid[:gid]. */
function workerImageUser(): string | undefined {
  const dockerfile = fs.readFileSync(path.join(dockerDir, 'worker.Dockerfile'), 'utf8');
  return [...dockerfile.matchAll(/^USER\s+(\S+)\s*$/gm)].at(-1)?.[1];
}

test('second review, finding 8: the worker image installs Python, bubblewrap, the dataset env by script', () => {
  const dockerfile = fs.readFileSync(path.join(dockerDir, 'worker.Dockerfile'), 'utf8');
  const script = 'docker/worker-image-setup.sh';
  assert.ok(fs.existsSync(path.join(repoRoot, script)), `${script} exists`);
  assert.match(dockerfile, new RegExp(`^COPY ${script} `, 'm'), 'the Dockerfile copies the install script');
  for (const step of ['system-packages', 'helper-venv', 'check'])
    assert.match(dockerfile, new RegExp(`^RUN .*${script} ${step}\\b`, 'm'), `the Dockerfile runs its ${step} step`);
  // The check runs last, on the finished tree: the helper package and the marker the code reads are in place.
  assert.ok(
    dockerfile.lastIndexOf(`${script} check`) > dockerfile.lastIndexOf('COPY . .'),
    'the check runs after the repository is copied',
  );
  const user = workerImageUser();
  assert.ok(user && /^[1-9]\d*:[1-9]\d*$/.test(user), `USER is a numeric non-root uid:gid (got ${user})`);
  for (const name of ['TBT_STATE_DIR', 'TBT_DATASET_ENV_DIR'])
    assert.match(dockerfile, new RegExp(`^ENV ${name}=/`, 'm'), `the image sets ${name}`);
});

test('second review, finding 8: compose gives the rollout worker what bubblewrap needs, without --privileged', () => {
  const { services, volumes } = loadCompose();
  const rollout = services['rollout-worker']!;
  assert.notEqual(rollout.privileged, true, 'never --privileged');
  assert.deepEqual(rollout.cap_add ?? [], [], 'no added capability (bubblewrap gets its own in a user namespace)');
  assert.deepEqual(rollout.cap_drop, ['ALL'], 'every capability dropped');
  assert.ok(rollout.user === undefined || rollout.user === workerImageUser(), 'runs as the image user');
  const options = (rollout.security_opt ?? []) as string[];
  const seccomp = options.find((o) => o.startsWith('seccomp='))?.slice('seccomp='.length);
  assert.ok(seccomp && seccomp !== 'unconfined', `a seccomp profile file, not unconfined (got ${seccomp})`);
  assert.ok(fs.existsSync(path.resolve(dockerDir, seccomp)), `${seccomp} exists beside compose.yaml`);
  assert.equal(path.relative(dockerDir, path.resolve(dockerDir, seccomp)), 'seccomp-bubblewrap.json');
  // /proc with Docker's masked paths on top cannot be mounted again in a user namespace (bwrap --proc).
  assert.ok(options.includes('systempaths=unconfined'), 'systempaths=unconfined');
  assert.ok(options.includes('no-new-privileges:true'), 'no-new-privileges:true');
  assert.ok(
    options.some((o) => o.startsWith('apparmor=')),
    'an AppArmor profile that allows mount (docker-default denies it)',
  );
  // The CLI service runs dataset code too (tasks validate, prepare-env): the same settings; every other one keeps
  // Docker's defaults.
  assert.deepEqual([services.tbt?.security_opt, services.tbt?.cap_drop], [rollout.security_opt, rollout.cap_drop]);
  for (const [name, service] of Object.entries(services)) {
    if (name === 'rollout-worker' || name === 'tbt') continue;
    const opts = ((service.security_opt ?? []) as string[]).join(' ');
    assert.doesNotMatch(opts, /seccomp|systempaths|apparmor/, `${name} keeps Docker's defaults`);
  }
  const environment = rollout.environment as Record<string, unknown>;
  assert.equal(environment.TBT_UNSANDBOXED, undefined, 'dataset code is never run unsandboxed');
  // The relay connects each sandbox port straight to the search service (no listener on the worker's loopback).
  const loopback = withDefaults(String(environment.TBT_SANDBOX_LOOPBACK ?? ''));
  assert.equal(loopback, '8108=typesense:8108');
  assert.ok(services.typesense, 'the search service the relay names is in the file');
  // Imported suites, their data and their Python environments: one volume, read-only for the workers.
  const mount = (rollout.volumes as string[]).find((v) => v.startsWith('tbt-datasets:'));
  assert.equal(mount, 'tbt-datasets:/var/lib/tbt/datasets:ro');
  assert.ok(volumes && 'tbt-datasets' in volumes, 'tbt-datasets is declared');
  const cli = services.tbt!;
  assert.deepEqual(cli?.profiles, ['cli'], 'the CLI service (import, prepare-env) runs only when asked');
  assert.ok((cli.volumes as string[]).includes('tbt-datasets:/var/lib/tbt/datasets'), 'the CLI writes the volume');
});

test('second review, finding 7 (compose superuser): workers connect as a restricted admin, not the superuser', () => {
  const { services } = loadCompose();
  const control = services['control-db']!.environment as Record<string, string>;
  const superuser = control.POSTGRES_USER;
  const superPassword = /\$\{([A-Z0-9_]+)/.exec(control.POSTGRES_PASSWORD ?? '')?.[1];
  assert.ok(superuser && superPassword, 'control-db names its superuser and password variable');
  for (const [name, service] of Object.entries(services)) {
    const environment = JSON.stringify(service.environment ?? {});
    const url = (service.environment as Record<string, string> | undefined)?.DATABASE_URL;
    if (url) {
      assert.notEqual(decodeURIComponent(/^postgres:\/\/([^:@]+)/.exec(url)?.[1] ?? ''), superuser, `${name} user`);
    }
    if (name !== 'control-db' && name !== 'setup')
      assert.ok(!environment.includes(superPassword), `${name} never gets ${superPassword}`);
  }
  const setupEnv = services.setup!.environment as Record<string, string>;
  assert.match(
    setupEnv.TBT_CONTROL_DB_SUPERUSER_URL ?? '',
    new RegExp(`^postgres://${superuser}:\\$\\{${superPassword}`),
  );
});

test('second review, finding 7 (compose superuser): setup makes a non-superuser admin fit for workers', async () => {
  const { ensureRestrictedAdmin } = await import('../docker/control-db-admin.ts');
  const { databaseUrl } = await import('../config/environment.ts');
  const pg = (await import('pg')).default;
  const superUrl = databaseUrl(env);
  const tag = `tbt_admin_test_${process.pid}_${Date.now() % 100_000}`;
  const adminUrl = (password: string, role = tag, database = tag) => {
    const u = new URL(superUrl);
    u.username = role;
    u.password = password;
    u.pathname = `/${database}`;
    return u.toString();
  };
  const asSuper = new pg.Client({ connectionString: superUrl });
  await asSuper.connect();
  const former = `${tag}_former`;
  try {
    await ensureRestrictedAdmin(superUrl, adminUrl('first-password'));
    await ensureRestrictedAdmin(superUrl, adminUrl('second-password')); // again: idempotent, new password
    const role = await asSuper.query(
      `SELECT rolsuper, rolcreatedb, rolcreaterole, rolcanlogin, rolreplication, rolbypassrls,
              pg_has_role($1, 'pg_signal_backend', 'member') AS signal,
              (SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1) AS owner
         FROM pg_roles WHERE rolname = $1`,
      [tag],
    );
    assert.deepEqual(role.rows[0], {
      rolsuper: false,
      rolcreatedb: true,
      rolcreaterole: true,
      rolcanlogin: true,
      rolreplication: false,
      rolbypassrls: false,
      signal: true,
      owner: tag,
    });

    // What infra/control-database.ts and the sandbox pool do as the admin: roles, memberships, databases,
    // and DROP DATABASE ... WITH (FORCE) over a session of a role it created.
    const admin = new pg.Client({ connectionString: adminUrl('second-password') });
    await admin.connect();
    const clone = `${tag}_clone`;
    try {
      await assert.rejects(
        new pg.Client({ connectionString: adminUrl('first-password') }).connect(),
        /password authentication failed/,
      );
      await admin.query(`CREATE ROLE ${clone} LOGIN NOSUPERUSER PASSWORD 'clone-password'`);
      await admin.query(`GRANT ${clone} TO CURRENT_USER`);
      await admin.query(`CREATE DATABASE ${clone}`);
      await admin.query(`GRANT CONNECT ON DATABASE ${clone} TO ${clone}`);
      const session = new pg.Client({ connectionString: adminUrl('clone-password', clone, clone) });
      await session.connect();
      session.on('error', () => undefined);
      await admin.query(`DROP DATABASE ${clone} WITH (FORCE)`);
      await session.end().catch(() => undefined);
      await admin.query(`DROP ROLE ${clone}`);
      // Not a superuser: the server's programs and files stay out of reach.
      await assert.rejects(admin.query(`COPY (SELECT 1) TO PROGRAM 'true'`), /superuser|pg_execute_server_program/);
      await assert.rejects(admin.query(`ALTER ROLE ${tag} SUPERUSER`), /superuser|permission denied/);
    } finally {
      await admin.end();
      await asSuper.query(`DROP DATABASE IF EXISTS ${clone} WITH (FORCE)`);
      await asSuper.query(`DROP ROLE IF EXISTS ${clone}`);
    }

    // A deployment from before, whose admin was the superuser: setup takes superuser away from it.
    await asSuper.query(`CREATE ROLE ${former} LOGIN SUPERUSER`);
    await ensureRestrictedAdmin(superUrl, adminUrl('former-password', former));
    const demoted = await asSuper.query('SELECT rolsuper, rolcreatedb FROM pg_roles WHERE rolname = $1', [former]);
    assert.deepEqual(demoted.rows[0], { rolsuper: false, rolcreatedb: true });
    await assert.rejects(ensureRestrictedAdmin(superUrl, superUrl), /must not be the superuser/);
  } finally {
    for (const role of [tag, former]) {
      await asSuper.query(`DROP DATABASE IF EXISTS ${tag} WITH (FORCE)`);
      const exists = await asSuper.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role]);
      if (exists.rowCount) {
        await asSuper.query(`DROP OWNED BY ${role}`);
        await asSuper.query(`DROP ROLE ${role}`);
      }
    }
    await asSuper.end();
  }
});

test("second review, finding 8: docker/seccomp-bubblewrap.json is Docker's default plus what bubblewrap calls", () => {
  type Rule = { names: string[]; action: string; args?: unknown[]; includes?: object; excludes?: object };
  type Profile = { syscalls: Rule[] } & Record<string, unknown>;
  const read = (file: string) => JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
  const ours = read(path.join(dockerDir, 'seccomp-bubblewrap.json'));
  const base = read(path.join(repoRoot, 'test', 'fixtures', 'docker-seccomp', 'moby-default.json'));
  const { syscalls: _ours, ...oursTop } = ours;
  const { syscalls: _base, ...baseTop } = base;
  assert.deepEqual(oursTop, baseTop, 'default action, errno and architectures as Docker has them');
  const key = (r: Rule) => JSON.stringify(r);
  const baseKeys = new Set(base.syscalls.map(key));
  const oursKeys = new Set(ours.syscalls.map(key));
  const removed = base.syscalls.filter((r) => !oursKeys.has(key(r)));
  const added = ours.syscalls.filter((r) => !baseKeys.has(key(r)));
  // Only the rules that allow clone without namespace flags go (replaced by an unconditional clone).
  assert.deepEqual(
    removed.map((r) => [r.names, r.action, (r.excludes as { caps?: string[] } | undefined)?.caps]),
    [
      [['clone'], 'SCMP_ACT_ALLOW', ['CAP_SYS_ADMIN']],
      [['clone'], 'SCMP_ACT_ALLOW', ['CAP_SYS_ADMIN']],
    ],
  );
  assert.equal(added.length, 1, 'one added rule');
  const rule = added[0]!;
  assert.equal(rule.action, 'SCMP_ACT_ALLOW');
  assert.equal(rule.args, undefined);
  assert.equal(rule.includes, undefined);
  assert.equal(rule.excludes, undefined);
  // What bwrap calls (test/worker-image.test.ts loads the profile; without sethostname or umount2 it fails).
  assert.deepEqual([...rule.names].sort(), ['clone', 'mount', 'pivot_root', 'sethostname', 'umount2', 'unshare']);
});

/** A service's volume mounts in the short syntax (`source:target[:ro]`); an anonymous one has no source. */
function mounts(service: Record<string, any>): { source?: string; target: string; readOnly: boolean }[] {
  return ((service.volumes ?? []) as string[]).map((v) => {
    const parts = withDefaults(v).split(':');
    const readOnly = parts.length > 1 && parts.at(-1) === 'ro';
    if (readOnly || (parts.length > 2 && parts.at(-1) === 'rw')) parts.pop();
    return parts.length === 1 ? { target: parts[0]!, readOnly } : { source: parts[0], target: parts[1]!, readOnly };
  });
}

const within = (dir: string, parent: string) => dir === parent || dir.startsWith(`${parent.replace(/\/$/, '')}/`);

/**
 * Where a worker keeps its durable state (issue 21, "Workers are cattle"): TBT_STATE_DIR set to an absolute path,
 * writable, on a named volume the file declares, so a recreated container finds it again and every replica of the
 * service mounts the same one (an anonymous volume is one per container). Also the volume readers of it mount.
 */
function stateVolumeProblems(doc: { services: Record<string, Record<string, any>>; volumes?: object }): string[] {
  const problems: string[] = [];
  const stateVolume = (name: string): { source: string; target: string } | undefined => {
    const service = doc.services[name];
    if (!service) return void problems.push(`service ${name} is missing`);
    const dir = withDefaults(String((service.environment as Record<string, unknown> | undefined)?.TBT_STATE_DIR ?? ''));
    if (!path.posix.isAbsolute(dir)) return void problems.push(`service ${name}: TBT_STATE_DIR is not set to a path`);
    const mount = mounts(service).find((m) => within(dir, m.target));
    if (!mount) return void problems.push(`service ${name}: TBT_STATE_DIR ${dir} is on no volume (container layer)`);
    if (!mount.source) problems.push(`service ${name}: ${mount.target} is an anonymous volume, one per container`);
    else if (!(mount.source in (doc.volumes ?? {})))
      problems.push(`service ${name}: ${mount.source} is not a named volume the file declares`);
    if (mount.readOnly) problems.push(`service ${name}: ${mount.target} is mounted read-only`);
    if (service.container_name !== undefined) problems.push(`service ${name}: a container name forbids replicas`);
    return mount.source ? { source: mount.source, target: mount.target } : undefined;
  };
  const gpu = stateVolume('gpu-worker');
  stateVolume('bookkeeping-worker');
  // The policy server loads the exports the learner returns: the same volume, at the same path, read-only.
  const policy = doc.services['policy-server'];
  if (gpu && policy && !mounts(policy).some((m) => m.source === gpu.source && m.target === gpu.target && m.readOnly))
    problems.push(`service policy-server: does not mount ${gpu.source} read-only at ${gpu.target}`);
  return problems;
}

test('issue 21: the GPU and bookkeeping workers keep their state on a declared volume, the same for replicas', () => {
  const compose = loadCompose();
  assert.deepEqual(stateVolumeProblems(compose), []);
  const { services } = compose;
  assert.equal(services['gpu-worker']!.environment.TBT_STATE_DIR, '/checkpoints');
  assert.ok(mounts(services['gpu-worker']!).some((m) => m.source === 'tbt-checkpoints' && m.target === '/checkpoints'));
  assert.ok(
    mounts(services['bookkeeping-worker']!).some((m) => m.source === 'tbt-state' && m.target === '/var/lib/tbt/state'),
  );
  // The images create the folders as their non-root user: a fresh named volume takes the owner of the image's folder.
  const images = {
    'gpu-worker.Dockerfile': '/checkpoints',
    'worker.Dockerfile': '/var/lib/tbt/state',
  };
  for (const [file, dir] of Object.entries(images)) {
    const text = fs.readFileSync(path.join(dockerDir, file), 'utf8');
    assert.ok(
      [...text.matchAll(/mkdir -p ([^\n;&]+)/g)].some((m) => m[1]!.split(/\s+/).includes(dir)),
      `${file}: ${dir}`,
    );
    const chowned = [...text.matchAll(/chown -R \S+ ([^\n;&]+)/g)].flatMap((m) => m[1]!.trim().split(/\s+/));
    assert.ok(
      chowned.some((owned) => within(dir, owned)),
      `${file} gives ${dir} to its user`,
    );
  }

  // What the file had before: the GPU worker on its container layer, one bookkeeping folder per container.
  const broken = loadCompose();
  delete broken.services['gpu-worker']!.environment.TBT_STATE_DIR;
  broken.services['bookkeeping-worker']!.volumes = ['/var/lib/tbt/state'];
  broken.services['policy-server']!.volumes = ['tbt-models:/models:ro'];
  assert.deepEqual(stateVolumeProblems(broken), [
    'service gpu-worker: TBT_STATE_DIR is not set to a path',
    'service bookkeeping-worker: /var/lib/tbt/state is an anonymous volume, one per container',
  ]);
  broken.services['gpu-worker']!.environment.TBT_STATE_DIR = '/var/lib/tbt/learners';
  broken.services['bookkeeping-worker']!.volumes = ['tbt-undeclared:/var/lib/tbt/state:ro'];
  assert.deepEqual(stateVolumeProblems(broken), [
    'service gpu-worker: TBT_STATE_DIR /var/lib/tbt/learners is on no volume (container layer)',
    'service bookkeeping-worker: tbt-undeclared is not a named volume the file declares',
    'service bookkeeping-worker: /var/lib/tbt/state is mounted read-only',
  ]);
  broken.services['gpu-worker']!.environment.TBT_STATE_DIR = '/checkpoints';
  assert.equal(
    stateVolumeProblems(broken).at(-1),
    'service policy-server: does not mount tbt-checkpoints read-only at /checkpoints',
  );
});
