-- 0001_init: the tables every part of slurm-ml writes to.
--
-- Every write table has `idempotency_key text NOT NULL UNIQUE`: writers insert with
-- ON CONFLICT (idempotency_key) DO NOTHING, so a replayed write (spool drain, retry
-- after a lost acknowledgement) lands exactly once. `id` gives a stable insertion
-- order for ties on the time columns. `recorded_at` is when the row reached the
-- database, which differs from the event time after an outage.
-- Applied inside one transaction by slurm_ml.store.migrate; no BEGIN/COMMIT here.

CREATE TABLE health_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    node            text        NOT NULL,
    gpu_index       integer     CHECK (gpu_index >= 0),
    check_id        text        NOT NULL,
    severity        text        NOT NULL,
    message         text        NOT NULL,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    observed_at     timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX health_events_node_observed_idx ON health_events (node, observed_at DESC);
CREATE INDEX health_events_observed_idx ON health_events (observed_at DESC);

CREATE TABLE job_gpu_stats (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    job_id          bigint      NOT NULL CHECK (job_id >= 0),
    job_name        text        NOT NULL,
    user_name       text        NOT NULL,
    account         text        NOT NULL,
    node            text        NOT NULL,
    gpu_index       integer     NOT NULL CHECK (gpu_index >= 0),
    gpu_type        text,
    peak_mem_mb     bigint      NOT NULL CHECK (peak_mem_mb >= 0),
    mean_util_pct   double precision NOT NULL CHECK (mean_util_pct BETWEEN 0 AND 100),
    started_at      timestamptz,
    ended_at        timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_gpu_stats_user_name_idx ON job_gpu_stats (user_name, job_name, ended_at DESC);
CREATE INDEX job_gpu_stats_job_idx ON job_gpu_stats (job_id);
CREATE INDEX job_gpu_stats_node_ended_idx ON job_gpu_stats (node, ended_at DESC);

CREATE TABLE util_samples (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    job_id          bigint      NOT NULL CHECK (job_id >= 0),
    node            text        NOT NULL,
    gpu_index       integer     NOT NULL CHECK (gpu_index >= 0),
    sampled_at      timestamptz NOT NULL,
    util_pct        double precision NOT NULL CHECK (util_pct BETWEEN 0 AND 100),
    mem_used_mb     bigint      NOT NULL CHECK (mem_used_mb >= 0),
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX util_samples_job_sampled_idx ON util_samples (job_id, sampled_at);
CREATE INDEX util_samples_node_sampled_idx ON util_samples (node, sampled_at);
CREATE INDEX util_samples_sampled_idx ON util_samples (sampled_at);

CREATE TABLE budget_snapshots (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    taken_at        timestamptz NOT NULL,
    account         text        NOT NULL,
    parent          text,
    budget_share    double precision NOT NULL CHECK (budget_share >= 0),
    usage_gpu_hours double precision NOT NULL CHECK (usage_gpu_hours >= 0),
    owed_gpu_hours  double precision NOT NULL CHECK (owed_gpu_hours >= 0),
    site_factor     bigint,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX budget_snapshots_account_taken_idx ON budget_snapshots (account, taken_at);
CREATE INDEX budget_snapshots_taken_idx ON budget_snapshots (taken_at);

CREATE TABLE decisions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    cycle           bigint      NOT NULL CHECK (cycle >= 0),
    job_id          bigint      CHECK (job_id >= 0),
    kind            text        NOT NULL,
    reason          text        NOT NULL,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    decided_at      timestamptz NOT NULL,
    dry_run         boolean     NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decisions_job_decided_idx ON decisions (job_id, decided_at);
CREATE INDEX decisions_cycle_idx ON decisions (cycle);
CREATE INDEX decisions_decided_idx ON decisions (decided_at);

CREATE TABLE audit_log (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    actor           text        NOT NULL,
    action          text        NOT NULL,
    target          text        NOT NULL,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    at              timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_at_idx ON audit_log (at);
CREATE INDEX audit_log_target_idx ON audit_log (target, at);
