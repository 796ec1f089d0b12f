import path from 'node:path';
import { readEnvironment, repoRoot, temporalUiUrl } from '../../config/environment.ts';
import { up } from './infra.ts';
import { validate } from './tasks.ts';

/**
 * `npm run demo`: the main job on the embedded default. Today it brings the stack up and proves the
 * episode backend end to end on the tiny suite; the training campaign plugs in here when it lands.
 */
export async function demo(_args: string[]): Promise<number> {
  await up();
  console.log('\n== tiny suite: sandboxes, MCP tools, golden replay and grading ==');
  const code = await validate([path.join(repoRoot, 'tasks', 'tiny')]);
  if (code !== 0) return code;
  console.log(`\ncampaign: not implemented yet (the Temporal campaign is the next issue). Temporal UI: ${temporalUiUrl(readEnvironment())}`);
  return 0;
}
