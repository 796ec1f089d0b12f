import { withClient } from '../infra/control-database.ts';

export function createSmokeActivities(controlUrl: string) {
  return {
    /** Records one row (idempotent by id) and returns how many smoke checks the control database holds. */
    async recordSmokeCheck(id: string, message: string): Promise<number> {
      return withClient(controlUrl, async (c) => {
        await c.query('INSERT INTO smoke_checks (id, message) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [
          id,
          message,
        ]);
        const { rows } = await c.query<{ n: string }>('SELECT count(*) AS n FROM smoke_checks');
        return Number(rows[0]!.n);
      });
    },
  };
}

export type SmokeActivities = ReturnType<typeof createSmokeActivities>;
