import fs from 'node:fs';
import path from 'node:path';
import { databaseUrl, readEnvironment } from '../../config/environment.ts';
import { renderEpisodePage } from '../../core/report/episode-page.ts';
import { renderEpisodeText } from '../../core/report/episode-text.ts';
import { episodeView } from '../../core/report/episode-view.ts';
import { readStoredEpisodes } from '../../campaign-records/episode-pages.ts';
import { episodesShowCommand } from '../command-definitions.ts';
import { parseCommandLine } from '../command-line.ts';
import { commandErrorExit, consoleIo, InputError, writeFileAtomic, type CommandIo } from '../command-support.ts';

/**
 * `tbt episodes show ID [--html FILE]`: one recorded episode from the control database as text (transcript,
 * tool calls and results, judge verdicts, terminal-state diff, outcome); --html also writes its static page,
 * the same page a report links to (docs/episode-viewer.md).
 */
export async function episodeShow(args: string[], io: CommandIo = consoleIo): Promise<number> {
  try {
    const { values, positionals } = parseCommandLine(episodesShowCommand, args);
    const id = positionals[0]!;
    const episode = (await readStoredEpisodes(databaseUrl(readEnvironment()), [id])).get(id);
    if (!episode) throw new InputError(`tbt episodes show: no episode with id '${id}' in the control database`);
    const view = episodeView(episode);
    io.out(renderEpisodeText(view));
    if (values.html) {
      fs.mkdirSync(path.dirname(path.resolve(values.html)), { recursive: true });
      writeFileAtomic(values.html, renderEpisodePage(view));
      io.err(`wrote ${values.html}`);
    }
    return 0;
  } catch (err) {
    return commandErrorExit(err, episodesShowCommand, io);
  }
}
