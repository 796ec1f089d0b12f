import fs from 'node:fs';
import path from 'node:path';
import { BadInputError } from '../../core/errors.ts';
import {
  parseCosts,
  parseEvalAggregate,
  parseProbeAggregates,
  parseTrainingSteps,
} from '../../core/report/parse-inputs.ts';
import { renderHtml } from '../../core/report/render-html.ts';
import { renderMarkdown } from '../../core/report/render-markdown.ts';
import { buildReportModel } from '../../core/report/build-report-model.ts';
import type { ReportInput } from '../../core/report/report-model.ts';
import {
  commandErrorExit,
  parseFlags,
  consoleIo,
  InputError,
  readInputFile,
  UsageError,
  writeFileAtomic,
  type CommandIo,
} from '../command-support.ts';

/**
 * `tbt report`: one static HTML page (inline SVG plots, no scripts, no network) and a markdown summary
 * of a campaign from its files: probe difficulty, training steps, evaluations and costs.
 */

const USAGE = `usage: tbt report --out DIR [inputs] [--title TEXT] [--campaign ID]

Writes DIR/index.html (self-contained: inline CSS and SVG, no scripts, no network) and DIR/summary.md.
At least one input is required.

  --probe FILE        aggregates.jsonl of 'tbt prepare': difficulty-band histogram, retained bands highlighted
  --steps FILE        training steps, one JSON object per line: {step, mean_reward, informative_group_fraction,
                      loss, grad_norm, groups, infra_errors_refilled, zero_variance_replaced, wall_s}
  --before FILE       'tbt eval aggregate --out' file of the starting checkpoint (needs --after)
  --after FILE        'tbt eval aggregate --out' file of the trained checkpoint (needs --before)
  --eval FILE         a single 'tbt eval aggregate --out' file, without comparison
  --costs FILE        JSON {"probing": USD, "training": USD, "evaluation": USD}, each optional; evaluation
                      defaults to the sum of the eval files' campaign costs
  --title TEXT        page title (default: "Campaign <ID>" or "Training campaign report")
  --campaign ID       campaign id shown under the title`;

/** Input files of a report; the campaign workflow passes the files it wrote. */
export interface ReportFiles {
  probe?: string;
  steps?: string;
  before?: string;
  after?: string;
  eval?: string;
  costs?: string;
  title?: string;
  campaign?: string;
}

const text = (file: string) => readInputFile(file).toString('utf8');

/** Reads and parses every given file; errors name the file, the line for JSONL, and the field. */
export function loadReportInput(files: ReportFiles): ReportInput {
  if (!files.probe && !files.steps && !files.before && !files.after && !files.eval && !files.costs) {
    throw new UsageError('at least one input is required: --probe, --steps, --before/--after, --eval or --costs');
  }
  if (Boolean(files.before) !== Boolean(files.after))
    throw new UsageError('--before and --after go together (use --eval for a single evaluation)');
  try {
    return {
      title: files.title ?? (files.campaign ? `Campaign ${files.campaign}` : 'Training campaign report'),
      campaign: files.campaign ?? null,
      probe: files.probe ? parseProbeAggregates(files.probe, text(files.probe)) : null,
      steps: files.steps ? parseTrainingSteps(files.steps, text(files.steps)) : null,
      before: files.before ? parseEvalAggregate(files.before, text(files.before), 'before') : null,
      after: files.after ? parseEvalAggregate(files.after, text(files.after), 'after') : null,
      eval: files.eval ? parseEvalAggregate(files.eval, text(files.eval), 'evaluation') : null,
      costs: files.costs ? parseCosts(files.costs, text(files.costs)) : null,
    };
  } catch (err) {
    if (err instanceof BadInputError) throw new InputError(err.message, { cause: err });
    throw err;
  }
}

/** Renders the report into `outDir`; returns the paths written. */
export function writeReport(input: ReportInput, outDir: string): { html: string; markdown: string } {
  const model = buildReportModel(input);
  fs.mkdirSync(outDir, { recursive: true });
  const html = path.join(outDir, 'index.html');
  const markdown = path.join(outDir, 'summary.md');
  writeFileAtomic(html, renderHtml(model));
  writeFileAtomic(markdown, renderMarkdown(model));
  return { html, markdown };
}

function parseReportArgs(args: string[]): (ReportFiles & { out: string }) | 'help' {
  const values = parseFlags(args, {
    out: { type: 'string' },
    probe: { type: 'string' },
    steps: { type: 'string' },
    before: { type: 'string' },
    after: { type: 'string' },
    eval: { type: 'string' },
    costs: { type: 'string' },
    title: { type: 'string' },
    campaign: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) return 'help';
  if (!values.out) throw new UsageError('--out DIR is required');
  for (const flag of ['title', 'campaign'] as const) {
    if (values[flag] !== undefined && values[flag].trim() === '')
      throw new UsageError(`--${flag}: expected a non-empty value`);
  }
  const { help: _help, ...files } = values;
  return { ...files, out: values.out };
}

/** Runs `tbt report`; returns the exit code (0 ok, 1 bad input, 2 bad flags). */
export async function report(args: string[], io: CommandIo = consoleIo): Promise<number> {
  try {
    const parsed = parseReportArgs(args);
    if (parsed === 'help') {
      io.out(USAGE);
      return 0;
    }
    const { out, ...files } = parsed;
    const written = writeReport(loadReportInput(files), out);
    io.out(`wrote ${written.html}\nwrote ${written.markdown}`);
    return 0;
  } catch (err) {
    return commandErrorExit(err, 'report', USAGE, io);
  }
}
