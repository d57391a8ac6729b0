"""Changing a config that is already loaded: :func:`revise`, checked as a file is.

The simulator runs the site's config with a scenario's knobs changed (``--set
policy.fairshare.window_hours=72``, a sweep point, a scenario's ``policy:``) and on a
cluster of its own making (node classes, a budget tree of the trace's teams). Each is
the loaded :class:`Config` with some sections changed, and each must pass every rule a
file must pass: a knob out of range, a name Slurm would refuse, a rule that spans
sections. :func:`revise` writes the change over the config's own data and gives that to
:func:`parse_config`, so nothing is checked twice in two ways and no file is read again.
Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_ml.config.errors import Unreadable
from slurm_ml.config.parse import parse_config
from slurm_ml.config.schema import Config
from slurm_ml.model import GpuType

__all__ = ["config_data", "revise"]


def config_data(value: object) -> Any:
    """``value`` (a :class:`Config`, one of its sections or values) as the YAML data a
    file would hold for it: what :func:`parse_config` reads back to an equal value.

    Dataclasses become mappings of their fields (a :class:`GpuType` without its name,
    which is its key under ``gpu_types``), tuples lists, paths strings; plain data stays
    as it is (an :class:`Unreadable` too, for the parser to report).
    """
    if isinstance(value, Unreadable):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        skip = {"name"} if isinstance(value, GpuType) else set()
        return {f.name: config_data(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.name not in skip}
    if isinstance(value, Mapping):
        return {key: config_data(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [config_data(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _merge(base: Any, change: Any) -> Any:
    """``change`` written over ``base``: mappings key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(change, dict):
        return {**base, **{key: _merge(base.get(key), item) for key, item in change.items()}}
    return change


def revise(cfg: Config, overrides: Mapping[str, Any], *, source: str = "<overrides>") -> Config:
    """``cfg`` with ``overrides`` written over it, checked by the rules a file is.

    ``overrides`` is shaped like slurm-ml.yaml. A mapping is written over the mapping it
    lands on key by key, so ``{"policy": {"fairshare": {"window_hours": 72}}}`` changes
    one knob and keeps every other; anything else (a number, a string, a list, null)
    replaces what was there, as the same value written in the file would. A value may be
    YAML data or the config's own objects (a :class:`~slurm_ml.model.NodeClass`, a
    :class:`~slurm_ml.model.BudgetTree`, a tuple of
    :class:`~slurm_ml.config.schema.PartitionConfig`), read as :func:`config_data`
    writes them. An unknown key is an error, not ignored.

    The whole result goes through :func:`parse_config`: raises ConfigError listing every
    problem, each at its config path (``policy.fairshare.window_hours: must be > 0``);
    ``source`` names the overrides where a problem has no path. ``revise(cfg, {})`` is
    ``cfg``; ``revise`` of a config changed with :func:`dataclasses.replace` checks it.
    """
    return parse_config(_merge(config_data(cfg), config_data(overrides)), source)
