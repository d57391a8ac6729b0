-- 0004_requeues_for: find the requeues made so that a given job could start.
--
-- `slurm-ml why JOBID` on a waiting (or just started) job lists the contracts' and the
-- fast lane's requeues of other jobs made for it: their decisions carry the job in
-- details->>'for_job'. A partial expression index keeps that lookup off a scan of every
-- cycle's decisions. Applied inside one transaction by slurm_ml.store.migrate; no
-- BEGIN/COMMIT here.

CREATE INDEX decisions_for_job_idx ON decisions ((details->>'for_job'))
    WHERE details ? 'for_job';
