import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Ajv, type ValidateFunction } from 'ajv';
import { parse, parseAllDocuments } from 'yaml';
import { environmentSchema, repoRoot, taskQueues } from '../../config/environment.ts';
import { setupEnvironmentSchema } from '../../docker/control-db-admin.ts';

/**
 * k8s/ rendered as an operator renders it (`kubectl kustomize`, the pinned kubectl of k8s/requirements.txt) and
 * every rendered object checked without a cluster: built-in kinds strictly against the Kubernetes 1.33 and 1.37 API
 * schemas (kubernetes-validate, unknown fields rejected), KEDA's ScaledObject against the openAPIV3Schema of its
 * vendored CRD (k8s/schemas/), made strict the same way. Then what keeps the manifests true to compose and to the
 * code: variable names, images, commands, the sandbox settings, queue names, secrets only by reference. Broken
 * manifests are run through the same checks, so they are known to fail.
 */

const kubernetesVersions = ['1.33.0', '1.37.0'];
const composeFile = path.join(repoRoot, 'docker', 'compose.yaml');

type Doc = Record<string, any>;

function toolsVenv(): string {
  const recorded = path.join(repoRoot, '.tools', 'k8s-venv');
  if (fs.existsSync(recorded)) return fs.readFileSync(recorded, 'utf8').trim();
  // scripts/setup.sh's own path, for a checkout whose .tools/ predates step 3e.
  const hash = createHash('sha256')
    .update(fs.readFileSync(path.join(repoRoot, 'k8s', 'requirements.txt')))
    .digest('hex')
    .slice(0, 16);
  const cache = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
  return path.join(cache, 'thinkingbox-temporal', `k8s-${hash}`);
}

function tool(name: string): string {
  const bin = path.join(toolsVenv(), 'bin', name);
  assert.ok(fs.existsSync(bin), `${bin} is missing: run bash scripts/setup.sh (step 3e)`);
  return bin;
}

function render(dir: string): { text: string; docs: Doc[] } {
  const r = spawnSync(tool('kubectl'), ['kustomize', path.join(repoRoot, dir)], { encoding: 'utf8' });
  assert.equal(r.status, 0, `kubectl kustomize ${dir}: ${r.stderr}`);
  const docs = parseAllDocuments(r.stdout).map((d) => d.toJS() as Doc);
  return { text: r.stdout, docs };
}

/** Vendored CRDs by apiVersion/kind: the served version's openAPIV3Schema. */
function crdSchemas(): Map<string, Doc> {
  const out = new Map<string, Doc>();
  const dir = path.join(repoRoot, 'k8s', 'schemas');
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.yaml'))) {
    const crd = parse(fs.readFileSync(path.join(dir, file), 'utf8')) as Doc;
    for (const v of crd.spec.versions as Doc[]) {
      out.set(`${crd.spec.group}/${v.name}/${crd.spec.names.kind}`, v.schema.openAPIV3Schema);
    }
  }
  return out;
}

/**
 * OpenAPI v3 (structural CRD schema) to JSON Schema as the API server applies it with strict field validation:
 * nullable adds null, int-or-string takes either, and an object with properties rejects others unless it keeps
 * unknown fields.
 */
function strictJsonSchema(s: Doc): Doc {
  const out: Doc = {};
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x-kubernetes-') || k === 'nullable' || k === 'format') continue;
    if (k === 'properties')
      out.properties = Object.fromEntries(Object.entries(v as Doc).map(([p, q]) => [p, strictJsonSchema(q)]));
    else if (k === 'items' || k === 'additionalProperties') out[k] = typeof v === 'object' ? strictJsonSchema(v) : v;
    else if (k === 'allOf' || k === 'anyOf' || k === 'oneOf') out[k] = (v as Doc[]).map(strictJsonSchema);
    else out[k] = v;
  }
  if (s['x-kubernetes-int-or-string']) out.type = ['integer', 'string'];
  if (s.nullable && typeof out.type === 'string') out.type = [out.type, 'null'];
  if (out.properties && !('additionalProperties' in out) && !s['x-kubernetes-preserve-unknown-fields']) {
    out.additionalProperties = false;
  }
  return out;
}

function crdValidators(): Map<string, ValidateFunction> {
  const ajv = new Ajv({ allErrors: true, strict: false });
  const objectMeta = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
  return new Map(
    [...crdSchemas()].map(([key, schema]) => {
      const strict = strictJsonSchema(schema);
      strict.properties.metadata = objectMeta;
      strict.required = [...new Set([...(strict.required ?? []), 'apiVersion', 'kind', 'metadata'])];
      return [key, ajv.compile(strict)];
    }),
  );
}

/** Validates rendered YAML; returns the validator's lines and the problems (empty = valid). */
function validate(text: string): { lines: string[]; problems: string[] } {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-k8s-')), 'rendered.yaml');
  fs.writeFileSync(file, text);
  const args = [...kubernetesVersions.flatMap((v) => ['-k', v]), '--strict', file];
  const r = spawnSync(tool('kubernetes-validate'), args, { encoding: 'utf8' });
  fs.rmSync(path.dirname(file), { recursive: true });
  const lines = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.trim() !== '');
  const custom = crdValidators();
  const problems: string[] = [];
  for (const line of lines) {
    if (line.startsWith('INFO ')) continue;
    // A kind it has no schema for passes there with a warning: such a kind must be one whose CRD is vendored.
    const unknown = /Couldn't find schema for kind (\S+) with api version (\S+) /.exec(line);
    if (unknown && custom.has(`${unknown[2]}/${unknown[1]}`)) continue;
    problems.push(line.replace(file, '<rendered>'));
  }
  if (r.status !== 0 && problems.length === 0) problems.push(`kubernetes-validate exited ${r.status}`);
  for (const doc of parseAllDocuments(text).map((d) => d.toJS() as Doc)) {
    const check = custom.get(`${doc.apiVersion}/${doc.kind}`);
    const where = `${doc.kind}/${doc.metadata?.name}`;
    if (check && !check(doc))
      for (const e of check.errors ?? []) problems.push(`${where}${e.instancePath}: ${e.message}`);
  }
  return { lines, problems };
}

const base = render('k8s/base');
const build = render('k8s/builds/example');
const all = [...base.docs, ...build.docs];

function workloads(docs: Doc[]): Doc[] {
  return docs.filter((d) => ['Deployment', 'StatefulSet', 'DaemonSet', 'Job'].includes(d.kind));
}
function named(docs: Doc[], kind: string, name: string): Doc {
  const found = docs.find((d) => d.kind === kind && d.metadata.name === name);
  assert.ok(found, `${kind}/${name} is not rendered`);
  return found;
}
function container(workload: Doc): Doc {
  return workload.spec.template.spec.containers[0];
}
function envValue(c: Doc, name: string): string | undefined {
  return (c.env as Doc[] | undefined)?.find((e) => e.name === name)?.value;
}

const compose = parse(fs.readFileSync(composeFile, 'utf8'), { merge: true }) as Doc;
/** compose's image default for a service: `${VAR:-default}` -> default. */
function composeImage(service: string): string {
  return String(compose.services[service].image).replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1');
}

test('every rendered manifest passes the Kubernetes schemas (1.33, 1.37) and the vendored KEDA CRD', () => {
  for (const r of [base, build]) {
    const { lines, problems } = validate(r.text);
    assert.deepEqual(problems, []);
    assert.ok(lines.length >= r.docs.length, 'the validator said nothing of some objects');
  }
  assert.ok(all.some((d) => d.kind === 'ScaledObject'));
});

test('a broken manifest fails: a wrong field type, a missing required field, an unknown field, a bad CRD field', () => {
  const deployment = named(base.docs, 'Deployment', 'rollout-worker');
  const broken = (edit: (d: Doc) => void, kind = deployment): string => {
    const copy = structuredClone(kind);
    edit(copy);
    return JSON.stringify(copy);
  };
  const wrongType = validate(broken((d) => (d.spec.replicas = 'two')));
  assert.match(wrongType.problems.join('\n'), /spec\.replicas: 'two' is not of type 'integer', 'null'/);
  const missing = validate(broken((d) => delete d.spec.selector));
  assert.match(missing.problems.join('\n'), /spec: 'selector' is a required property/);
  const typo = validate(
    broken((d) => (d.spec.template.spec.containers[0].imag = d.spec.template.spec.containers[0].image)),
  );
  assert.match(typo.problems.join('\n'), /Additional properties are not allowed \('imag' was unexpected\)/);
  const scaled = named(base.docs, 'ScaledObject', 'rollout-worker');
  const badCrd = validate(broken((d) => (d.spec.minReplicaCount = 'one'), scaled));
  assert.match(badCrd.problems.join('\n'), /ScaledObject\/rollout-worker\/spec\/minReplicaCount: must be integer/);
  const unknownCrd = validate(broken((d) => (d.spec.trigers = d.spec.triggers), scaled));
  assert.match(unknownCrd.problems.join('\n'), /must NOT have additional properties/);
});

test('every variable the manifests give our containers is one the code reads; secrets only by secretKeyRef', () => {
  const read = new Set([...Object.keys(environmentSchema.shape), ...Object.keys(setupEnvironmentSchema.shape)]);
  // Credentials an episode config names with api_key_env (docker-compose.test.ts says the same of compose).
  for (const name of ['TBT_POLICY_API_KEY', 'OPENAI_API_KEY']) read.add(name);
  const clusterEnv = named(base.docs, 'ConfigMap', 'tbt-cluster-env');
  const unknown: string[] = Object.keys(clusterEnv.data).filter((k) => !read.has(k));
  const literalSecrets: string[] = [];
  for (const w of workloads(all)) {
    for (const c of [...w.spec.template.spec.containers, ...(w.spec.template.spec.initContainers ?? [])]) {
      const ours = /^tbt-(gpu-)?worker(:|$)/.test(c.image);
      for (const e of (c.env ?? []) as Doc[]) {
        if (ours && !read.has(e.name)) unknown.push(`${w.metadata.name}: ${e.name}`);
        if (/PASSWORD|SECRET|KEY|TOKEN|DATABASE_URL/.test(e.name) && !e.valueFrom?.secretKeyRef) {
          literalSecrets.push(`${w.metadata.name}: ${e.name}`);
        }
      }
    }
  }
  assert.deepEqual(unknown, []);
  assert.deepEqual(literalSecrets, []);
  assert.equal(all.filter((d) => d.kind === 'Secret').length, 0, 'no Secret is written down; kubectl makes it');
});

test('images, commands and the sandbox settings are the ones of compose', () => {
  const version = composeImage('rollout-worker').split(':').at(-1);
  for (const w of workloads(all)) {
    for (const c of w.spec.template.spec.containers as Doc[]) {
      if (c.image.startsWith('tbt-'))
        assert.match(c.image, new RegExp(`^tbt-(gpu-)?worker:${version}$`), w.metadata.name);
    }
  }
  const sameImage: [string, string, string][] = [
    ['StatefulSet', 'control-db', 'control-db'],
    ['StatefulSet', 'typesense', 'typesense'],
    ['StatefulSet', 'policy-server', 'policy-server'],
  ];
  for (const [kind, name, service] of sameImage)
    assert.equal(container(named(all, kind, name)).image, composeImage(service));
  const sameCommand: [string, string, string][] = [
    ['Deployment', 'rollout-worker', 'rollout-worker'],
    ['StatefulSet', 'tbt-gpu', 'gpu-worker'],
    ['Job', 'setup', 'setup'],
    ['Deployment', 'orchestrator-worker-0123456789abcdef', 'orchestrator-worker'],
    ['Deployment', 'bookkeeping-worker-0123456789abcdef', 'bookkeeping-worker'],
  ];
  for (const [kind, name, service] of sameCommand) {
    assert.deepEqual(container(named(all, kind, name)).command, compose.services[service].command, name);
  }
  // Dataset code runs in bubblewrap in these two, under compose's x-bubblewrap settings.
  for (const name of ['rollout-worker', 'tbt-cli']) {
    const pod = named(base.docs, 'Deployment', name).spec.template.spec;
    const c = pod.containers[0];
    assert.equal(pod.securityContext.runAsUser, 10001);
    assert.equal(pod.securityContext.runAsNonRoot, true);
    assert.deepEqual(c.securityContext.capabilities.drop, ['ALL']);
    assert.equal(c.securityContext.allowPrivilegeEscalation, false);
    assert.deepEqual(pod.securityContext.seccompProfile, {
      type: 'Localhost',
      localhostProfile: 'tbt/seccomp-bubblewrap.json',
    });
    assert.equal(pod.securityContext.appArmorProfile.type, 'Unconfined');
    assert.equal(c.securityContext.procMount, 'Unmasked');
    assert.equal(pod.hostUsers, false, 'procMount Unmasked needs a pod user namespace');
  }
  assert.ok(compose.services['rollout-worker'].security_opt.includes('seccomp=./seccomp-bubblewrap.json'));
  const installer = named(base.docs, 'DaemonSet', 'seccomp-installer').spec.template.spec;
  const copy = installer.initContainers[0].command.join(' ');
  assert.match(copy, /cp \/app\/docker\/seccomp-bubblewrap\.json \/host-seccomp\/tbt\//);
  assert.ok(fs.existsSync(path.join(repoRoot, 'docker', 'seccomp-bubblewrap.json')));
  assert.equal(installer.volumes[0].hostPath.path, '/var/lib/kubelet/seccomp');
});

test('queues, drain, tensor parallelism and volumes agree with the code and compose', () => {
  const clusterEnv = named(base.docs, 'ConfigMap', 'tbt-cluster-env').data;
  const trigger = named(base.docs, 'ScaledObject', 'rollout-worker').spec.triggers[0];
  assert.equal(trigger.type, 'temporal');
  assert.equal(
    trigger.metadata.taskQueue,
    taskQueues({ TBT_TASK_QUEUE_PREFIX: clusterEnv.TBT_TASK_QUEUE_PREFIX }).rollout,
  );
  assert.equal(trigger.metadata.endpointFromEnv, 'TBT_TEMPORAL_ADDRESS');
  assert.equal(trigger.metadata.namespaceFromEnv, 'TBT_TEMPORAL_NAMESPACE');
  const rollout = named(base.docs, 'Deployment', 'rollout-worker');
  assert.equal(rollout.spec.replicas, undefined, 'KEDA owns the replica count');
  const drain = Number(envValue(container(rollout), 'TBT_ROLLOUT_DRAIN_S'));
  assert.ok(rollout.spec.template.spec.terminationGracePeriodSeconds > drain, 'the kill must come after the drain');

  const vllm = container(named(base.docs, 'StatefulSet', 'policy-server'));
  const tp = vllm.args[vllm.args.indexOf('--tensor-parallel-size') + 1];
  assert.equal(Number(tp), Number(vllm.resources.limits['nvidia.com/gpu']));
  const gpu = named(base.docs, 'StatefulSet', 'tbt-gpu');
  assert.equal(
    container(gpu).env.find((e: Doc) => e.name === 'TBT_GPU_HOST').valueFrom.fieldRef.fieldPath,
    'metadata.name',
  );
  assert.equal(gpu.spec.serviceName, named(base.docs, 'Service', 'tbt-gpu').metadata.name);

  // Every compose volume but Temporal's own database is a claim here.
  const claims = new Set([
    ...base.docs.filter((d) => d.kind === 'PersistentVolumeClaim').map((d) => d.metadata.name),
    ...workloads(base.docs).flatMap((w) => (w.spec.volumeClaimTemplates ?? []).map((t: Doc) => t.metadata.name)),
  ]);
  const expected = Object.keys(compose.volumes).filter((v) => v !== 'temporal-db-data');
  assert.deepEqual(
    expected.filter((v) => !claims.has(v)),
    [],
  );
});

test('workflow workers are only in the per-build overlay, named and selected by their build id', () => {
  const versioned = ['orchestrator-worker', 'bookkeeping-worker'];
  assert.deepEqual(
    workloads(base.docs).filter((w) => versioned.some((v) => w.metadata.name.startsWith(v))),
    [],
  );
  for (const w of workloads(build.docs)) {
    assert.match(w.metadata.name, /-0123456789abcdef$/);
    assert.equal(w.spec.selector.matchLabels['tbt.build-id'], '0123456789abcdef');
  }
  assert.equal(named(base.docs, 'ConfigMap', 'tbt-cluster-env').data.TBT_WORKER_DEPLOYMENT_NAME, 'tbt');
});
