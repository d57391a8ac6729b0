"""``slurm-ml install`` / ``uninstall``: put slurm-ml into an existing Slurm configuration
and take it out again, exactly.

Planning is pure (:mod:`.plan`: rendered files + the directory's current state + the
manifest → a :class:`~.plan.ChangeSet`); only :mod:`.state`, :mod:`.apply` and
:mod:`.sacct` do I/O. The dev cluster runs the same :func:`.install.install` the CLI
runs, so the admin's path is the tested path.
"""
