import fs from 'node:fs';
import path from 'node:path';
import { stringify } from 'yaml';
import { readUidListInput } from '../../cli/command-support.ts';
import { BadInputError } from '../../core/errors.ts';
import { checkFamiliesDisjoint, familySplit, type FamilySplit } from '../../core/family-split.ts';
import { formatProblem, loadSuites } from '../../task-suites/task-suite-loader.ts';

/**
 * `bench:learning --split templates`: hold out whole task families of the campaign's suite, chosen by its seed
 * (core/family-split.ts), as the list its `exclude_uids` names. Checked before anything starts: the training pool
 * (the suite less the list, read back as the campaign reads it) shares no family with the held-out tasks.
 */
export function writeTemplateSplit(suiteDir: string, seed: number, outFile: string): FamilySplit {
  const { suites, problems } = loadSuites(suiteDir);
  if (problems.length > 0)
    throw new BadInputError(`suite ${suiteDir}: ${problems.length} problem(s), first ${formatProblem(problems[0]!)}`);
  const uids = suites.flatMap((s) => s.tasks.map((t) => t.uid));
  const split = familySplit(uids, seed);
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  fs.writeFileSync(
    outFile,
    `# Held out by bench:learning --split templates (seed ${seed}): every task of ` +
      `${split.heldOutFamilies.length} families.\n${stringify(split.heldOut)}`,
  );
  const heldOut = new Set(readUidListInput(outFile).uids);
  checkFamiliesDisjoint(
    uids.filter((u) => !heldOut.has(u)),
    [...heldOut],
  );
  return split;
}
