"""slurm-ml's YAML configuration: one strict loader, one frozen :class:`Config`.

The package, one job per module:

* :mod:`~slurm_ml.config.schema`: the sections as frozen dataclasses, each knob with its
  default and range check;
* :mod:`~slurm_ml.config.checks`: the value checks (ranges, Slurm-safe names);
* :mod:`~slurm_ml.config.rules`: the rules that span knobs (priority bands, QOS weight,
  minimum runtime);
* :mod:`~slurm_ml.config.parse`: :func:`parse_config`, which validates parsed data and
  reports every problem at once, with its path (``budgets.programs[1].weight: must be
  > 0``);
* :mod:`~slurm_ml.config.yaml_reader`: the one strict YAML reader (duplicate keys,
  bounds, line numbers), which the simulator's scenario files go through too;
* :mod:`~slurm_ml.config.load`: :func:`load_config`, a file through the reader and the
  parser;
* :mod:`~slurm_ml.config.revision`: :func:`revise`, a loaded config with overrides
  written over it, checked by the same parser;
* :mod:`~slurm_ml.config.errors`: :class:`ConfigIssue` and :class:`ConfigError`.

Import from here: these names are the public surface (the scenario reader also uses
:mod:`~slurm_ml.config.yaml_reader` itself). Only :func:`load_config` touches the file
system; the rest is pure. A leaf: of slurm-ml it imports only :mod:`slurm_ml.model` and
the helpers below it.
"""

from __future__ import annotations

from slurm_ml.config.errors import ConfigError, ConfigIssue
from slurm_ml.config.load import load_config
from slurm_ml.config.parse import parse_config
from slurm_ml.config.revision import revise
from slurm_ml.config.schema import (
    AdmissionConfig,
    ClusterConfig,
    Config,
    ContractsConfig,
    DaemonConfig,
    FairshareConfig,
    FastLaneConfig,
    HealthConfig,
    PartitionConfig,
    PolicyConfig,
    PriorityWeightsConfig,
    QuarantineConfig,
    ReclaimConfig,
    SlurmConfig,
    StoreConfig,
    SubmitdConfig,
)

__all__ = [
    "AdmissionConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "ContractsConfig",
    "DaemonConfig",
    "FairshareConfig",
    "FastLaneConfig",
    "HealthConfig",
    "PartitionConfig",
    "PolicyConfig",
    "PriorityWeightsConfig",
    "QuarantineConfig",
    "ReclaimConfig",
    "SlurmConfig",
    "StoreConfig",
    "SubmitdConfig",
    "load_config",
    "parse_config",
    "revise",
]
