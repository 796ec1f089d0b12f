import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { writeConfigVariant } from '../config/config-variant.ts';
import { readEnvironment, repoRoot } from '../config/environment.ts';
import { LEARNING_SPLITS, type LearningSplit } from '../core/report/learning-line.ts';
import { parseEvalAggregate } from '../core/report/parse-inputs.ts';
import { campaignRunDir } from '../campaign-records/campaign-run-folder.ts';
import { learnerFiles } from '../learner-control/learner-process.ts';
import { defaultRetention, pruneLearnerFolder } from '../infra/retention.ts';
import { startWorkers, stopWorkers } from '../infra/local-workers.ts';
import { startCampaign } from '../cli/commands/campaign.ts';
import { up } from '../cli/commands/infra.ts';
import { learningVerdict, parseLearningResults, taskResults } from './learning/learning-results.ts';
import { writeTemplateSplit } from './learning/template-split.ts';

/**
 * bench:learning: does training work? Runs the campaign of bench/learning/config.yaml on the embedded default
 * (SmolLM2-135M on CPU, the vLLM CPU engine, the CPU learner): train on the training half of tasks/tiny-learning,
 * evaluate the base and the trained policy on the held-out half only, and end with one line, the paired
 * comparison over the held-out tasks (same bootstrap as the report), its interval over tasks and over families.
 *   npm run bench:learning [-- --seed N] [-- --config FILE] [-- --max-staleness K] [-- --lora RANK]
 *                          [-- --split instances|templates] [-- --partial-rollouts (with --max-staleness >= 1)]
 *   npm run bench:learning -- --recompute learning-results.json   (the line of a recorded run; trains nothing)
 */

const { values } = parseArgs({
  options: {
    seed: { type: 'string' },
    config: { type: 'string', default: path.join(repoRoot, 'bench', 'learning', 'config.yaml') },
    'max-staleness': { type: 'string' },
    'partial-rollouts': { type: 'boolean', default: false },
    lora: { type: 'string' },
    split: { type: 'string', default: 'instances' },
    recompute: { type: 'string' },
  },
});
if (values.recompute !== undefined) {
  const file = values.recompute;
  console.log(learningVerdict(parseLearningResults(file, fs.readFileSync(file, 'utf8')), file));
} else await train();

async function train(): Promise<void> {
  const seed = values.seed === undefined ? undefined : Number(values.seed);
  if (seed !== undefined && !Number.isInteger(seed)) throw new Error(`--seed: expected an integer, got ${values.seed}`);
  const campaignSeed = seed ?? loadCampaignConfig(values.config).seed;
  // --split templates: hold out whole task families instead of odd instances (docs/learning-benchmark.md).
  const split = values.split as LearningSplit;
  if (!LEARNING_SPLITS.includes(split))
    throw new Error(`--split: expected ${LEARNING_SPLITS.join(' or ')}, got ${values.split}`);
  // --max-staleness K: the same campaign with overlapped steps (docs/async-training.md), named apart (`-k<K>`).
  const staleness = values['max-staleness'] === undefined ? undefined : Number(values['max-staleness']);
  if (staleness !== undefined && !(Number.isInteger(staleness) && staleness >= 0))
    throw new Error(`--max-staleness: expected an integer >= 0, got ${values['max-staleness']}`);
  // --partial-rollouts: a sync interrupts the episodes in flight instead of waiting (`-partial`); overlapped only.
  const partial = values['partial-rollouts'] === true;
  if (partial && !(staleness !== undefined && staleness >= 1))
    throw new Error('--partial-rollouts: needs --max-staleness 1 (or more): only overlapped steps sample over a sync');
  // --lora RANK: LoRA adapters instead of full fine-tuning (docs/lora.md), named apart (`-lora<RANK>`).
  const loraRank = values.lora === undefined ? undefined : Number(values.lora);
  if (loraRank !== undefined && !(Number.isInteger(loraRank) && loraRank >= 1))
    throw new Error(`--lora: expected a rank (an integer >= 1), got ${values.lora}`);
  const variant = [
    staleness === undefined ? '' : `-k${staleness}`,
    partial ? '-partial' : '',
    loraRank === undefined ? '' : `-lora${loraRank}`,
    split === 'instances' ? '' : `-${split}`,
  ].join('');
  const configFile = variant
    ? writeConfigVariant(values.config, path.join(os.tmpdir(), `bench-learning${variant}.yaml`), (config) => {
        config.name = `${config.name}${variant}`;
        if (staleness !== undefined) {
          config.training.max_staleness = staleness;
          config.learner.is_cap ??= 2;
          // Temperature 0.6: the ratio must compare the sampled distribution's log-probabilities with the learner's.
          config.learner.sampler_logprobs ??= 'processed';
        }
        if (partial) config.training.partial_rollouts = true;
        if (loraRank !== undefined) {
          config.learner.lora = { rank: loraRank, alpha: 2 * loraRank };
          // LoRA takes about 10x full fine-tuning's learning rate (Schulman et al., "LoRA Without Regret").
          config.learner.lr = 10 * Number(config.learner.lr);
        }
        if (split === 'templates') {
          // The campaign's own seed picks the held-out families: another seed holds out other families.
          const heldOutFile = path.join(os.tmpdir(), `bench-learning${variant}-s${campaignSeed}-held-out.yaml`);
          const s = writeTemplateSplit(String(config.suite), campaignSeed, heldOutFile);
          config.exclude_uids = heldOutFile;
          console.log(
            `split:       templates (seed ${campaignSeed}): ${s.heldOut.length} held-out tasks of ` +
              `${s.heldOutFamilies.length} families (${s.heldOutFamilies.join(', ')}), never trained on; ` +
              `${s.training.length} training tasks of ${s.trainingFamilies.length} families`,
          );
        }
      })
    : values.config;

  const started = Date.now();
  const env = readEnvironment();
  await up();
  // vLLM's CPU build pins its compute to one core and keeps the other for its HTTP server by default; on a 2-core
  // machine that halves the compute for rollouts. Unpinned, the OS shares both cores (workers this starts only).
  process.env.VLLM_CPU_OMP_THREADS_BIND ??= 'nobind';
  // Workers this run started are stopped at the end (a finished benchmark should not keep four processes running).
  const spawned = startWorkers(env);
  const { workflowId, status } = await startCampaign(configFile, { wait: true, seed }).finally(() =>
    stopWorkers(env, spawned),
  );
  const minutes = (Date.now() - started) / 60_000;
  if (status?.stage !== 'done' || !status.evalBefore || !status.evalAfter)
    throw new Error(`campaign ${workflowId} ended at stage ${status?.stage} without both evaluations`);
  const read = (file: string, label: string) => parseEvalAggregate(file, fs.readFileSync(file, 'utf8'), label);
  const before = read(status.evalBefore.aggregate, 'before');
  const after = read(status.evalAfter.aggregate, 'after');
  console.log(`\ncampaign ${workflowId}: ${status.step} steps`);
  if (status.manifest) console.log(`manifest:    ${status.manifest}`);
  if (status.report) console.log(`report:      ${status.report.html}\nsummary:     ${status.report.markdown}`);
  // A finished run resumes nothing: its step checkpoints (weights and optimizer, ~1.7 GB each here) and all exports
  // but the last (the trained policy) go; three runs used to leave ~18 GB. Before the line: it stays last.
  const pruned = pruneLearnerFolder(learnerFiles(env.TBT_STATE_DIR, workflowId).dir, {
    ...defaultRetention,
    keepExports: 1,
    keepCheckpoints: 0,
  });
  console.log(
    `learner:     ${pruned.removed.length} files and folders removed, ${(pruned.freedBytes / 2 ** 30).toFixed(1)} GiB`,
  );
  // Per-task results beside the line, so that a later interval can be computed without training (--recompute).
  const results = taskResults(
    { campaign: workflowId, split, seed: campaignSeed, attempts: after.aggregate.repeats, minutes },
    before.aggregate.tasks,
    after.aggregate.tasks,
  );
  const outDir = status.report ? path.dirname(status.report.html) : campaignRunDir(env.TBT_STATE_DIR, workflowId);
  const resultsFile = path.join(outDir, 'learning-results.json');
  fs.writeFileSync(resultsFile, `${JSON.stringify(results, null, 2)}\n`);
  console.log(`results:     ${resultsFile}`);
  const line = learningVerdict(results, resultsFile);
  fs.writeFileSync(path.join(outDir, 'learning.txt'), `${line}\n`);
  console.log(line);
}
