import fs from 'node:fs';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { renderToolCall } from '../core/agent-prompt.ts';

/**
 * The scale bench's task suite: the tiny suite's scenarios, and its tasks copied under `count` distinct uids
 * (`scale/<n>/<scenario>/<name>`), so a stage of `count` tasks has that many keys without writing new tasks.
 */

interface TinyTask {
  uid: string;
  scenario: string;
  query: string;
  golden: { tool: string; arguments: Record<string, unknown> }[];
  [field: string]: unknown;
}

export function writeScaleSuite(sourceDir: string, targetDir: string, count: number): string[] {
  fs.mkdirSync(path.join(targetDir, 'tasks'), { recursive: true });
  fs.cpSync(path.join(sourceDir, 'scenarios'), path.join(targetDir, 'scenarios'), { recursive: true });
  const files = fs.readdirSync(path.join(sourceDir, 'tasks')).sort();
  const source = files.flatMap(
    (f) => (parse(fs.readFileSync(path.join(sourceDir, 'tasks', f), 'utf8')) as { tasks: TinyTask[] }).tasks,
  );
  const byScenario = new Map<string, TinyTask[]>();
  const uids: string[] = [];
  for (let n = 0; n < count; n++) {
    const base = source[n % source.length]!;
    const uid = `scale/${n}/${base.uid.split('/').slice(1).join('/')}`;
    uids.push(uid);
    byScenario.set(base.scenario, [...(byScenario.get(base.scenario) ?? []), { ...base, uid }]);
  }
  for (const [scenario, tasks] of byScenario)
    fs.writeFileSync(path.join(targetDir, 'tasks', `${scenario}.yaml`), stringify({ tasks }));
  return uids;
}

/**
 * The instant scripted policy's answer: the task's golden tool call on the first turn (found by the user's
 * query, which copies share), then `<DONE>` once a tool result came back. Every third first turn gives up
 * instead, so tasks have mixed outcomes and the probe's selection has tasks in its difficulty bands.
 */
export function scriptedAnswer(sourceDir: string): (messages: { role: string; content: string }[]) => string {
  let firstTurns = 0;
  const goldenByQuery = new Map<string, string>();
  for (const f of fs.readdirSync(path.join(sourceDir, 'tasks'))) {
    const { tasks } = parse(fs.readFileSync(path.join(sourceDir, 'tasks', f), 'utf8')) as { tasks: TinyTask[] };
    for (const t of tasks) goldenByQuery.set(t.query, renderToolCall(t.golden[0]!.tool, t.golden[0]!.arguments));
  }
  return (messages) => {
    if (messages.at(-1)?.role === 'tool') return 'Done. <DONE>';
    const query = messages.filter((m) => m.role === 'user').at(-1)?.content ?? '';
    firstTurns += 1;
    if (firstTurns % 3 === 0) return 'I cannot do that. <DONE>';
    return goldenByQuery.get(query) ?? 'Done. <DONE>';
  };
}
