"""slurm-ml: make a shared Slurm cluster good at ML work."""

__version__ = "0.2.0"
