-- Control database: what the system knows about its own work. Idempotent; applied by `tbt up` and workers.
-- One row: this deployment's tag, part of every database name it creates, so that deployments sharing a
-- Postgres server never take each other's sandboxes or templates for their own.
CREATE TABLE IF NOT EXISTS deployment (
  singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  tag         text NOT NULL DEFAULT substr(md5(gen_random_uuid()::text), 1, 8) CHECK (tag ~ '^[0-9a-f]{8}$'),
  created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO deployment DEFAULT VALUES ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS sandbox_templates (
  name        text PRIMARY KEY,
  scenario    text NOT NULL,
  fingerprint text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS sandboxes (
  name        text PRIMARY KEY,
  template    text NOT NULL REFERENCES sandbox_templates(name) ON DELETE CASCADE,
  state       text NOT NULL CHECK (state IN ('creating', 'ready', 'leased')),
  owner       text,
  leased_at   timestamptz,
  expires_at  timestamptz NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sandboxes_ready ON sandboxes (template, state);
-- Own-tag databases without a sandboxes row, and when the sweeper first saw them (dropped past a minimum age).
CREATE TABLE IF NOT EXISTS sandbox_orphans (
  name        text PRIMARY KEY,
  first_seen  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS golden_states (
  key         text PRIMARY KEY,
  state_hash  text NOT NULL,
  state       jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS smoke_checks (
  id          text PRIMARY KEY,
  message     text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS episodes (
  id             text PRIMARY KEY,
  task_uid       text NOT NULL,
  suite          text NOT NULL,
  scenario       text NOT NULL,
  domain         text NOT NULL,
  purpose        text NOT NULL CHECK (purpose IN ('probe', 'train', 'eval', 'adhoc')),
  campaign       text,
  step           integer,
  group_index    integer,
  repetition     integer NOT NULL DEFAULT 0,
  status         text NOT NULL
                 CHECK (status IN ('running', 'success', 'agent_failure', 'infrastructure_error', 'task_error')),
  reward         real,
  finish_reason  text,
  cause          text,
  policy_model   text,
  record         jsonb,
  started_at     timestamptz NOT NULL DEFAULT now(),
  finished_at    timestamptz
);
ALTER TABLE episodes ADD COLUMN IF NOT EXISTS attempt text;
-- task_error came later: a database made before it gets the wider check once (re-adding it each start would scan).
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'episodes_status_check'
                 AND pg_get_constraintdef(oid) LIKE '%task_error%') THEN
    ALTER TABLE episodes DROP CONSTRAINT IF EXISTS episodes_status_check;
    ALTER TABLE episodes ADD CONSTRAINT episodes_status_check
      CHECK (status IN ('running', 'success', 'agent_failure', 'infrastructure_error', 'task_error'));
  END IF;
END $$;
CREATE INDEX IF NOT EXISTS episodes_by_task ON episodes (task_uid, status);
CREATE INDEX IF NOT EXISTS episodes_by_campaign ON episodes (campaign, step, purpose);
-- Completed turns of running episodes, for a later attempt to resume from (rollout/turn-checkpoint-store.ts).
CREATE TABLE IF NOT EXISTS episode_turns (
  episode_id  text NOT NULL,
  turn        integer NOT NULL,
  attempt     text NOT NULL,
  checkpoint  jsonb NOT NULL,
  saved_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (episode_id, turn)
);
CREATE TABLE IF NOT EXISTS campaign_steps (
  campaign    text NOT NULL,
  step        integer NOT NULL,
  record      jsonb NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (campaign, step)
);
-- A campaign's small records that a later stage reads, possibly on another bookkeeping worker: the selected pool,
-- probe and evaluation aggregates, evaluation result lines, costs and the manifest (campaign-records/
-- campaign-files.ts). `name` is the file's path in the campaign's run folder; `content` is gzip-compressed.
CREATE TABLE IF NOT EXISTS campaign_files (
  campaign    text NOT NULL,
  name        text NOT NULL,
  content     bytea NOT NULL,
  written_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (campaign, name)
);
