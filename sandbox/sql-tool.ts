import { Ajv, type ValidateFunction } from 'ajv';
import type pg from 'pg';
import type { ToolDefinition } from '../config/task-schema.ts';
import { compileNamedSql } from '../core/named-sql.ts';
import { InfrastructureError, errorMessage, isInfrastructureSqlState } from '../core/errors.ts';

/**
 * Runs a scenario tool (declarative SQL) on one episode's database. Arguments are validated against the
 * tool's JSON Schema and bound as parameters. Returns the text the agent sees; a `ToolCallError` is a
 * mistake the agent can read and fix, an `InfrastructureError` means the database itself failed.
 */

export class ToolCallError extends Error {
  override readonly name = 'ToolCallError';
}

const ajv = new Ajv({ allErrors: true, strict: false, coerceTypes: false });
const validators = new WeakMap<ToolDefinition, ValidateFunction>();

function validatorFor(tool: ToolDefinition): ValidateFunction {
  let v = validators.get(tool);
  if (!v) {
    v = ajv.compile({ ...tool.input_schema, additionalProperties: tool.input_schema.additionalProperties ?? false });
    validators.set(tool, v);
  }
  return v;
}

function bindValue(value: unknown): unknown {
  if (value === undefined) return null;
  if (value !== null && typeof value === 'object') return JSON.stringify(value);
  return value;
}

/** The database, not the agent's request, is at fault; a statement timeout is the request's (57014). */
function isInfrastructureFailure(err: unknown): boolean {
  return isInfrastructureSqlState((err as { code?: string }).code);
}

function toJsonText(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

export async function runSqlTool(
  db: pg.ClientBase,
  tool: ToolDefinition,
  args: Record<string, unknown>,
): Promise<string> {
  const validate = validatorFor(tool);
  if (!validate(args)) {
    const problems = (validate.errors ?? []).map((e) => {
      const property = e.params && 'additionalProperty' in e.params ? ` '${String(e.params.additionalProperty)}'` : '';
      return `${e.instancePath || 'arguments'} ${e.message ?? 'is invalid'}${property}`;
    });
    throw new ToolCallError(`invalid arguments for ${tool.name}: ${problems.join('; ')}`);
  }
  const statements = Array.isArray(tool.sql) ? tool.sql : [tool.sql];
  let last: pg.QueryResult | undefined;
  try {
    await db.query('BEGIN');
    for (const sql of statements) {
      const { text, names } = compileNamedSql(sql);
      last = await db.query(
        text,
        names.map((n) => bindValue(args[n])),
      );
    }
    const empty = !last || (last.rows.length === 0 && !last.rowCount);
    if (tool.empty_error && empty) {
      await db.query('ROLLBACK');
      throw new ToolCallError(tool.empty_error);
    }
    await db.query('COMMIT');
  } catch (err) {
    if (err instanceof ToolCallError) throw err;
    await db.query('ROLLBACK').catch(() => undefined);
    if (isInfrastructureFailure(err))
      throw new InfrastructureError(`tool ${tool.name}: database failure: ${errorMessage(err)}`, { cause: err });
    throw new ToolCallError(`${tool.name} failed: ${errorMessage(err)}`);
  }
  if (tool.result === 'affected') return toJsonText({ affected: last?.rowCount ?? 0 });
  if (tool.result === 'row') return toJsonText(last?.rows[0] ?? null);
  return toJsonText(last?.rows ?? []);
}
