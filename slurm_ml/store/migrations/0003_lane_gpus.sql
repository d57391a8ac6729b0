-- 0003_lane_gpus: the fast lane's GPUs per account at each reconciler cycle.
--
-- The daemon records, with each project account's budget snapshot, the GPUs its short
-- jobs hold in the fast lane (running, and pending ones the cycle put in the lane), so
-- that admission can put a new short job in the lane at submission only while its
-- account and the cluster have room (slurm_ml.policy.fairshare.lane). NULL: not a
-- project account, or a snapshot written before this column existed.
-- Applied inside one transaction by slurm_ml.store.migrate; no BEGIN/COMMIT here.

ALTER TABLE budget_snapshots
    ADD COLUMN lane_gpus integer CHECK (lane_gpus IS NULL OR lane_gpus >= 0);
