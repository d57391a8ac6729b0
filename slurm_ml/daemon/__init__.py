"""The reconciler daemon: observe → decide → apply → record, once per cycle.

``observe`` reads Slurm and the store, ``plan`` turns what it saw into a pure ``Plan``
through ``slurm_ml.policy``, ``apply`` carries the plan out (intent in the audit log
first, so a crash never repeats an action) and ``loop`` runs cycles under the leader lock.
"""
