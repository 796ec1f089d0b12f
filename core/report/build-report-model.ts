import { costSection } from './cost-section.ts';
import { evalSection } from './eval-section.ts';
import { probeSection } from './probe-section.ts';
import { evaluations, type ReportInput, type ReportModel, type SectionPart } from './report-model.ts';
import { trainingSection } from './training-section.ts';

/** Builds the report model from its inputs: sections in campaign order, headline numbers results first. */
export function buildReportModel(input: ReportInput): ReportModel {
  if (!input.probe && !input.steps && evaluations(input).length === 0 && !input.costs) {
    throw new RangeError('a report needs at least one input (probe, training steps, an evaluation or costs)');
  }
  if ((input.before === null) !== (input.after === null))
    throw new RangeError('a before/after comparison needs both evaluations');
  const probe = input.probe ? probeSection(input.probe) : null;
  const training = input.steps ? trainingSection(input.steps) : null;
  const evaluation = evaluations(input).length > 0 ? evalSection(input) : null;
  const cost = input.costs || evaluations(input).some((e) => e.aggregate.cost) ? costSection(input) : null;
  // Sections follow the campaign (probe, train, evaluate, pay); the headline leads with the results.
  const sections = [probe, training, evaluation, cost].filter((p): p is SectionPart => p !== null);
  const headline = [evaluation, cost, training, probe].filter((p): p is SectionPart => p !== null);
  const sources: ReportModel['sources'] = [];
  if (input.probe) sources.push({ label: 'probe difficulty', path: input.probe.source });
  if (input.steps) sources.push({ label: 'training steps', path: input.steps.source });
  for (const e of evaluations(input)) sources.push({ label: `evaluation (${e.label})`, path: e.source });
  if (input.costs) sources.push({ label: 'costs', path: input.costs.source });
  return {
    title: input.title,
    campaign: input.campaign,
    headline: headline.flatMap((p) => p.headline),
    sections: sections.map((p) => p.section),
    sources,
  };
}
