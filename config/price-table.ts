import { z } from 'zod';

/** Prices of one model role, in USD per million tokens. */
export const rolePriceSchema = z
  .object({
    input_per_million: z.number().finite().nonnegative().describe('USD per million uncached input (prompt) tokens'),
    output_per_million: z
      .number()
      .finite()
      .nonnegative()
      .describe('USD per million output (completion, including reasoning) tokens'),
    cached_input_per_million: z
      .number()
      .finite()
      .nonnegative()
      .describe('USD per million input tokens served from the prompt cache'),
  })
  .strict();

/**
 * Price table for `tbt eval aggregate --prices`: one entry per role (policy, simulated user, judge),
 * so campaign cost can be reported per role. Write zeros for a role that costs nothing.
 */
export const priceTableSchema = z
  .object({
    policy: rolePriceSchema.describe('The agent being evaluated'),
    user: rolePriceSchema.describe('The simulated user'),
    judge: rolePriceSchema.describe('The yes/no rubric judge'),
  })
  .strict();

export type PriceTableConfig = z.infer<typeof priceTableSchema>;
