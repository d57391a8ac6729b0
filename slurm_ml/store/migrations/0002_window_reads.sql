-- 0002_window_reads: indexes for the reconciler daemon's window reads.
--
-- job_gpu_stats_since (budget status: mean GPU utilisation of the delivered hours over
-- the fair-share window) filters and orders on ended_at alone; 0001's job_gpu_stats
-- indexes all lead with another column, so without this every read scans the table,
-- which grows by one row per GPU of every finished job. The other window reads are
-- served by 0001's indexes: util_samples (sampled_at) and (job_id, sampled_at),
-- decisions (decided_at), health_events (observed_at DESC), audit_log's unique key.
-- Applied inside one transaction by slurm_ml.store.migrate; no BEGIN/COMMIT here.

CREATE INDEX job_gpu_stats_ended_idx ON job_gpu_stats (ended_at);
