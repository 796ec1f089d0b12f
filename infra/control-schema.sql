-- Control database: what the system knows about its own work. Idempotent; applied by `tbt up` and workers.
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
