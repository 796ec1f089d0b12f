import type { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes.js';
import { searchAttributes } from '../config/environment.ts';

/** gRPC status codes the Temporal operator service answers with. */
export const grpcNotFound = 5;
export const grpcAlreadyExists = 6;

export function grpcCode(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'number'
    ? err.code
    : undefined;
}

/**
 * Adds the search attributes our workflows set (config/environment.ts `searchAttributes`) that the namespace lacks
 * and returns their names. A workflow upserting an unregistered attribute fails its task in a loop, so the dev
 * server (`tbt up`), an external server and the compose set-up all register through here. An attribute of the same
 * name but another type is an error: the workflows could not set it.
 */
export async function ensureSearchAttributes(connection: Connection, namespace: string): Promise<string[]> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const missing: Record<string, number> = {};
  for (const [name, type] of Object.entries(searchAttributes)) {
    const wanted = encodeSearchAttributeIndexedValueType(type.toUpperCase() as 'KEYWORD' | 'INT' | 'BOOL')!;
    const existing = customAttributes?.[name];
    if (existing === undefined || existing === null) missing[name] = wanted;
    else if (existing !== wanted)
      throw new Error(
        `search attribute ${name} exists on namespace ${namespace} with another type (${existing}); wanted ${type}`,
      );
  }
  const names = Object.keys(missing);
  if (names.length === 0) return [];
  try {
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: missing });
  } catch (err) {
    if (grpcCode(err) !== grpcAlreadyExists) throw err;
  }
  return names;
}
