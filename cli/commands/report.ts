import fs from 'node:fs';
import path from 'node:path';
import { BadInputError, errorMessage } from '../../core/errors.ts';
import {
  parseCosts,
  parseEvalAggregate,
  parseProbeAggregates,
  parseTrainingSteps,
} from '../../core/report/parse-inputs.ts';
import { renderHtml } from '../../core/report/render-html.ts';
import { renderMarkdown } from '../../core/report/render-markdown.ts';
import { buildReportModel } from '../../core/report/build-report-model.ts';
import { evaluations, type ReportInput } from '../../core/report/report-model.ts';
import { databaseUrl, readEnvironment } from '../../config/environment.ts';
import { writeEvaluationEpisodePages } from '../../campaign-records/episode-pages.ts';
import { reportCommand } from '../command-definitions.ts';
import { parseCommandLine } from '../command-line.ts';
import {
  commandErrorExit,
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
  /** Write episode pages for the evaluations and link them from the report. */
  episodePages?: boolean;
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

/** Writes the pages of each evaluation's chosen episodes under `outDir/episodes/` and adds their table. */
export async function addEpisodePages(input: ReportInput, files: ReportFiles, outDir: string): Promise<number> {
  const controlUrl = databaseUrl(readEnvironment());
  let pages = 0;
  for (const key of ['before', 'after', 'eval'] as const) {
    const evaluation = input[key];
    const file = files[key];
    if (!evaluation || !file) continue;
    evaluation.episodes = await writeEvaluationEpisodePages(controlUrl, outDir, file);
    pages += evaluation.episodes.tasks.reduce((n, t) => n + Object.keys(t.hrefs).length, 0);
  }
  return pages;
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

function parseReportArgs(args: string[]): ReportFiles & { out: string } {
  const { values } = parseCommandLine(reportCommand, args);
  for (const flag of ['title', 'campaign'] as const) {
    if (values[flag] !== undefined && values[flag].trim() === '')
      throw new UsageError(`--${flag}: expected a non-empty value`);
  }
  const { 'episode-pages': episodePages, ...files } = values;
  return { ...files, episodePages, out: values.out };
}

/** Runs `tbt report`; returns the exit code (0 ok, 1 bad input, 2 bad flags). */
export async function report(args: string[], io: CommandIo = consoleIo): Promise<number> {
  try {
    const { out, ...files } = parseReportArgs(args);
    const input = loadReportInput(files);
    if (files.episodePages && !evaluations(input).length)
      throw new UsageError('--episode-pages needs an evaluation (--eval or --before/--after)');
    // The pages read the control database; an outage there must not cost a finished campaign its report.
    const pages = files.episodePages
      ? await addEpisodePages(input, files, out).catch((err: unknown) => {
          io.err(`tbt report: warning: no episode pages (${errorMessage(err)}); the report is written without them`);
          return undefined;
        })
      : 0;
    const written = writeReport(input, out);
    io.out(`wrote ${written.html}\nwrote ${written.markdown}`);
    if (pages !== undefined && files.episodePages)
      io.out(`wrote ${pages} episode pages in ${path.join(out, 'episodes')}`);
    return 0;
  } catch (err) {
    return commandErrorExit(err, reportCommand, io);
  }
}
