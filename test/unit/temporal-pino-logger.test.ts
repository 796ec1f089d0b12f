import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import pino from 'pino';
import { PinoTemporalLogger } from '../../infra/temporal-pino-logger.ts';

test("Temporal's log calls reach pino with their level, message and metadata", () => {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  const logger = new PinoTemporalLogger(pino({ level: 'debug' }, sink));
  logger.info('episode finished', { activityId: '7', workflowId: 'wf' });
  logger.warn('weight sync failed', { baseUrl: 'http://x' });
  logger.debug('details');
  assert.deepEqual(
    lines.map((l) => [l.level, l.msg, l.activityId ?? l.baseUrl ?? null]),
    [
      [30, 'episode finished', '7'],
      [40, 'weight sync failed', 'http://x'],
      [20, 'details', null],
    ],
  );
});
