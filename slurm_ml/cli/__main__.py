"""``python -m slurm_ml.cli``: the same as the ``slurm-ml`` command."""

from slurm_ml.cli import main

main()
