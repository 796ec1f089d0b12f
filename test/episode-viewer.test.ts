import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import type { Page } from 'playwright-core';
import { writeCampaignReport } from '../campaign-records/campaign-report.ts';
import { aggregateEvaluation } from '../campaign-records/evaluation-aggregation.ts';
import { tbt } from '../campaign-records/tbt-command.ts';
import { episodeConfigSchema, type EpisodeConfig } from '../config/episode-config.ts';
import { repoRoot } from '../config/environment.ts';
import { renderToolCall } from '../core/agent-prompt.ts';
import { launchChromium } from '../infra/headless-chromium.ts';
import { recordEpisode, type EpisodeAttempt } from '../rollout/episode-recording.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { OpenAIWireProtocolDouble, type ChatRequestBody } from './helpers/openai-wire-double.ts';
import { controlReady, newPool } from './helpers/stack.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * The episode viewer end to end: real episodes (sandboxes, MCP tools, scripted user, grading, the control
 * database) played by a scripted policy and judged by a scripted judge (test doubles of API models behind the
 * OpenAI wire protocol), aggregated and reported as a campaign does; the report opened in headless Chromium,
 * a link followed to an episode's page, its tool calls found there and in `tbt episodes show ID`.
 * Screenshots of a passed and a failed episode go to .state/episode-viewer/ (docs/episode-viewer-*.png).
 */

const dir = testTempDir('tbt-episode-viewer-');
const shots = path.join(repoRoot, '.state', 'episode-viewer');
const HELPDESK = 'business/helpdesk/contractor-asks-production';
const TODO = 'tiny/todo/complete-2';
const suiteOf: Record<string, string> = {
  [HELPDESK]: path.join(repoRoot, 'tasks', 'business'),
  [TODO]: path.join(repoRoot, 'tasks', 'tiny'),
};
const campaignId = `viewer-${process.pid}`;
const episodeId = (uid: string, rep: number) => `${campaignId}/eval-view/${uid}#${rep}`;

/** The agent that does the task: asks for the id and PIN, verifies, looks up, declines; or completes to-do 2. */
function goodAgent(body: ChatRequestBody): string {
  const last = body.messages.at(-1)!;
  const tools = body.messages.filter((m) => m.role === 'tool').length;
  if (body.messages.some((m) => m.content.includes('Mark to-do 2 as done')))
    return last.role === 'tool' ? 'To-do 2 is marked as done. <DONE>' : renderToolCall('complete_todo', { id: 2 });
  if (last.role === 'user' && last.content.includes('8642'))
    return (
      '<think>Verify the identity before anything else, then check the employment type.</think>' +
      renderToolCall('verify_identity', { employee_id: 'E1020', badge_pin: '8642' })
    );
  if (last.role === 'tool' && tools === 1) return renderToolCall('lookup_employee', { employee_id: 'E1020' });
  if (last.role === 'tool')
    return 'You are on a contract, so I have to decline: contractors cannot be granted production access.';
  if (last.content.includes('no way'))
    return 'I have to decline again, sorry: production is restricted to employees, even for reading logs. <DONE>';
  return 'I can look into that. Could you give me your employee id and badge PIN?';
}

/** The agent that gets it wrong: completes to-do 4, or grants access it may not grant without checking. */
function badAgent(body: ChatRequestBody): string {
  const last = body.messages.at(-1)!;
  if (body.messages.some((m) => m.content.includes('Mark to-do 2 as done')))
    return last.role === 'tool' ? 'Done. <DONE>' : renderToolCall('complete_todo', { id: 4 });
  return 'Sure, production access is yours now, enjoy the logs! <DONE>';
}

const doubles = [
  new OpenAIWireProtocolDouble(goodAgent),
  new OpenAIWireProtocolDouble(badAgent),
  // The judge says yes when the agent's last message declines.
  new OpenAIWireProtocolDouble((body) =>
    /<message>[\s\S]*decline[\s\S]*<\/message>/i.test(body.messages.at(-1)!.content) ? 'Yes' : 'No',
  ),
];

const attempt: EpisodeAttempt = {
  number: 1,
  heartbeat: () => undefined,
  log: { info: () => undefined, warn: () => undefined },
};

let controlUrl: string;
let pool: SandboxPool;
let configs: EpisodeConfig[];

before(async () => {
  controlUrl = await controlReady();
  pool = newPool({ warm: 0 });
  const [good, bad, judge] = await Promise.all(doubles.map((d) => d.start()));
  configs = [good!, bad!].map((url) =>
    episodeConfigSchema.parse({
      policy: { base_url: url, model: 'scripted-double', mode: 'chat' },
      user: { mode: 'scripted' },
      judge: { base_url: judge, model: 'scripted-judge' },
      limits: { max_agent_turns: 8, wall_clock_ms: 60_000 },
    }),
  );
});

after(async () => {
  await pool.close();
  await Promise.all(doubles.map((d) => d.stop()));
});

/** The report page's links to episode pages, by the text of their table row. */
async function episodeLinks(page: Page): Promise<{ task: string; text: string; href: string }[]> {
  return page.$$eval('a[href^="episodes/"]', (links) =>
    links.map((a) => ({
      task: a.closest('tr')!.querySelector('td')!.textContent ?? '',
      text: a.textContent ?? '',
      href: a.getAttribute('href')!,
    })),
  );
}

test(
  'a report links to episode pages that show the tool calls, the judge and the diff; tbt episodes show agrees',
  { timeout: 300_000 },
  async () => {
    // Repetition 0 by the good agent (passes), repetition 1 by the bad one (fails), both tasks.
    const uids = [HELPDESK, TODO];
    for (const uid of uids) {
      for (const rep of [0, 1]) {
        const summary = await recordEpisode(
          {
            episodeId: episodeId(uid, rep),
            suiteDir: suiteOf[uid]!,
            taskUid: uid,
            config: configs[rep]!,
            purpose: 'eval',
            campaign: campaignId,
            repetition: rep,
          },
          { pool, grader: new TerminalStateGrader(pool, controlUrl) },
          controlUrl,
          attempt,
        );
        assert.equal(summary.outcome, rep === 0 ? 'success' : 'agent_failure', `${uid}#${rep}: ${summary.cause}`);
      }
    }
    const ids = uids.flatMap((u) => [0, 1].map((r) => episodeId(u, r)));
    const deps = { controlUrl, stateDir: dir, signal: undefined };
    const { aggregate } = await aggregateEvaluation(deps, {
      campaignId,
      label: 'after',
      episodeIds: ids,
      uids,
      repeats: 2,
    });
    const written = await writeCampaignReport(deps, { campaignId, title: 'Episode viewer test', after: aggregate });
    const pages = fs.readdirSync(path.join(path.dirname(written.html), 'episodes'));
    assert.equal(pages.length, 4, `one passed and one failed page per task: ${pages.join(', ')}`);

    fs.mkdirSync(shots, { recursive: true });
    const browser = await launchChromium();
    let failedPageCalls: { name: string; args: string }[] = [];
    try {
      const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
      const requests: string[] = [];
      page.on('request', (r) => requests.push(r.url()));
      await page.goto(pathToFileURL(written.html).href, { waitUntil: 'load' });
      const links = await episodeLinks(page);
      assert.equal(links.length, 4, JSON.stringify(links));
      const failedTodo = links.find((l) => l.task === TODO && l.text === '#1')!;
      assert.ok(failedTodo, 'the failed to-do episode is linked');
      await page.locator('table:has(a[href^="episodes/"])').screenshot({ path: path.join(shots, 'report-table.png') });

      // Follow the link as a reader would: the page shows the agent's tool call, its result and the diff.
      await page.click(`a[href="${failedTodo.href}"]`);
      await page.waitForSelector('.tool-call');
      assert.ok(page.url().endsWith(failedTodo.href), page.url());
      failedPageCalls = await page.$$eval('.tool-call', (calls) =>
        calls.map((c) => ({
          name: c.getAttribute('data-tool')!,
          args: c.querySelector('pre.arguments')!.textContent!,
        })),
      );
      assert.deepEqual(failedPageCalls, [{ name: 'complete_todo', args: '{"id":4}' }]);
      const diff = await page.$$eval('table.diff tbody tr', (rows) => rows.map((r) => r.textContent));
      assert.ok(
        diff.some((d) => d!.startsWith('todos[id=2].done')),
        JSON.stringify(diff),
      );
      assert.match((await page.textContent('.cards'))!, /failed/);
      await page.screenshot({ path: path.join(shots, 'episode-viewer-failed.png'), fullPage: true });

      // The passed helpdesk episode: user turns, two tool calls, the judge's yes.
      await page.goBack({ waitUntil: 'load' });
      const passedHelpdesk = (await episodeLinks(page)).find((l) => l.task === HELPDESK && l.text === '#0')!;
      await page.click(`a[href="${passedHelpdesk.href}"]`);
      await page.waitForSelector('.tool-call');
      const tools = await page.$$eval('.tool-call', (calls) => calls.map((c) => c.getAttribute('data-tool')));
      assert.deepEqual(tools, ['verify_identity', 'lookup_employee']);
      assert.equal(await page.$$eval('.turn.user', (t) => t.length), 3, 'the query and two user replies');
      assert.match((await page.textContent('table.judge'))!, /contractor[\s\S]*yes/);
      assert.match((await page.textContent('.reasoning'))!, /Verify the identity/);
      await page.screenshot({ path: path.join(shots, 'episode-viewer-passed.png'), fullPage: true });
      assert.deepEqual(
        requests.filter((u) => !u.startsWith('file://')),
        [],
        'the report and the episode pages fetch nothing',
      );
    } finally {
      await browser.close();
    }

    // The same tool calls in `tbt episodes show`, and the diff lines of the grader.
    const text = await tbt(['episodes', 'show', episodeId(TODO, 1)], undefined);
    for (const c of failedPageCalls) assert.ok(text.includes(`tool call: ${c.name} ${c.args}`), text);
    assert.match(text, /outcome: agent_failure/);
    assert.match(text, /todos\[id=2\]\.done: false \(expected true\)/);
    const html = path.join(dir, 'shown.html');
    await tbt(['episodes', 'show', episodeId(HELPDESK, 1), '--html', html], undefined);
    assert.match(fs.readFileSync(html, 'utf8'), /<table class="judge">[\s\S]*>no</);
    await assert.rejects(tbt(['episodes', 'show', `${campaignId}/no-such-episode`], undefined), (err: Error) =>
      err.message.includes(`no episode with id '${campaignId}/no-such-episode'`),
    );
  },
);
