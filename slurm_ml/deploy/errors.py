"""Typed install errors; each carries the exit code the CLI gives it."""

from __future__ import annotations


class DeployError(Exception):
    """Base class: something stopped install/uninstall; the message says what to do."""

    exit_code = 1


class Refused(DeployError):
    """A change would overwrite or delete something slurm-ml does not own (or owns but was
    changed locally), or the admin's slurm.conf conflicts: refused without --force."""

    exit_code = 1


class BadInput(DeployError):
    """Bad options, config or directory (no slurm.conf, unknown partition, bad template)."""

    exit_code = 2


class SlurmUnreachable(DeployError):
    """sacctmgr/slurmdbd could not be reached for the accounts step."""

    exit_code = 3


class FileFailed(DeployError):
    """A file could not be read or written (permissions, a read-only or full disk). What
    was applied before it is in the manifest, so running the command again finishes it."""

    exit_code = 4
