import { z } from 'zod';

/**
 * Experiment trackers a campaign logs its steps and evaluations to (campaign-records/experiment-tracking.ts).
 * Off unless configured; each tracker is on when its section is present.
 */
export const trackingConfigSchema = z
  .object({
    mlflow: z
      .object({
        tracking_uri: z
          .string()
          .min(1)
          .optional()
          .describe(
            'MLflow tracking server or store URI; unset = MLFLOW_TRACKING_URI, else a SQLite store under the ' +
              'state folder (tracking/mlflow.db)',
          ),
        experiment: z.string().min(1).default('thinkingbox-temporal').describe('MLflow experiment of the runs'),
      })
      .strict()
      .optional()
      .describe('Log to MLflow: one run per campaign, the manifest as its params'),
    wandb: z
      .object({
        project: z.string().min(1).default('thinkingbox-temporal').describe('W&B project'),
        entity: z.string().min(1).optional().describe('W&B entity (team or user); unset = the key owner'),
        mode: z
          .enum(['auto', 'offline', 'online'])
          .default('auto')
          .describe('auto = online when WANDB_API_KEY is set at call time, else offline (run folders under state)'),
      })
      .strict()
      .optional()
      .describe('Log to W&B: one run per campaign (id derived from the campaign id), resumed with it'),
  })
  .strict();

export type TrackingConfig = z.infer<typeof trackingConfigSchema>;
