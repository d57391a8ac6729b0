"""Reading a config file: the file through the one strict YAML reader
(:mod:`~slurm_ml.config.yaml_reader`: duplicate keys are errors, not silently the last
one; size, nesting and aliases bounded), then :func:`parse_config`; every failure a
:class:`ConfigError`. The only part of :mod:`slurm_ml.config` that opens a file.

A config is read by services that must outlive a bad one (a SIGHUP with a broken file in
place keeps the running config), so nothing in the file may make this raise anything but
:class:`ConfigError` or take unbounded memory or time: the reader's bounds see to the
YAML, node sets are bounded in :mod:`~slurm_ml.config.parse`, and whatever still escapes
is caught at the end and reported as a ConfigError that says so.
"""

from __future__ import annotations

from pathlib import Path

from slurm_ml.config.errors import ConfigError, ConfigIssue, clip, one_line
from slurm_ml.config.parse import parse_config
from slurm_ml.config.schema import Config
from slurm_ml.config.yaml_reader import YamlError, read_text, read_yaml

__all__ = ["UNEXPECTED", "load_config"]

#: What an issue says when the loader itself failed on a file: a slurm-ml bug.
UNEXPECTED = "could not be checked"


def _file_error(message: str, source: str) -> ConfigError:
    return ConfigError([ConfigIssue("<file>", clip(one_line(message), 600))], source)


def _load(path: str | Path, source: str) -> Config:
    try:
        document = read_yaml(read_text(path, source), source)
    except YamlError as exc:
        raise ConfigError([ConfigIssue("<file>", exc.message)], source) from None
    duplicates = [ConfigIssue("<file>", one_line(f"{source}: line {dup.line}, column "
                                                 f"{dup.column}: {dup.problem}"))
                  for dup in document.duplicates]
    try:
        config = parse_config(document.data, source)
    except ConfigError as exc:
        raise ConfigError(duplicates + exc.issues, source) from None
    if duplicates:
        raise ConfigError(duplicates, source)
    return config


def load_config(path: str | Path) -> Config:
    """Read, parse and validate a config file; raise ConfigError listing every problem.

    Never anything else: a failure the checks above did not foresee (a bug of slurm-ml's
    or of a library's) is a ConfigError too, saying that the file could not be checked,
    so that a service reloading on SIGHUP keeps running on its old config.
    """
    source = str(path)
    try:
        return _load(path, source)
    except ConfigError:
        raise
    except MemoryError:
        raise _file_error(f"{source}: {UNEXPECTED}: out of memory while reading it",
                          source) from None
    except RecursionError:
        raise _file_error(f"{source}: {UNEXPECTED}: nested too deeply to check",
                          source) from None
    except Exception as exc:
        raise _file_error(f"{source}: {UNEXPECTED}: {type(exc).__name__}: {exc} (a slurm-ml "
                          "bug: please report it with the file)", source) from exc
