"""The sbatch corpus, as the unit and integration tests read it.

The scripts are third-party data and stay out of the repository: they are read in place
from ``../shared/data/sbatch/`` beside the repository root, or from the folder
``$SLURM_ML_SBATCH_CORPUS`` names. The project's own record of them is
``docs/research/sbatch-corpus/`` (``SOURCES.md`` and ``expected.yaml``). Tests that need
the scripts are marked ``needs_corpus``: without the folder they skip, naming it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "docs" / "research" / "sbatch-corpus"
#: The scripts, read in place: third-party data never enters the repository.
CORPUS = Path(os.environ.get("SLURM_ML_SBATCH_CORPUS")
              or REPO.parent / "shared" / "data" / "sbatch").resolve()
needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir(),
    reason=f"no sbatch corpus at {CORPUS} (set SLURM_ML_SBATCH_CORPUS to the folder of "
           f"the scripts): they are kept out of the repository (tests/sbatch_corpus.py)")
EXPECTED: dict[str, Any] = yaml.safe_load((RECORD / "expected.yaml").read_text())
CASES: dict[str, dict[str, Any]] = EXPECTED["cases"]


def script_text(name: str) -> str:
    """A script's text as sbatch would read it: a documentation snippet (``snippet``) gets
    the ``#!/bin/bash`` line its docs tell the reader to add."""
    text = (CORPUS / name).read_text()
    return "#!/bin/bash\n" + text if CASES[name].get("snippet") else text


def user_of(name: str) -> str:
    """Who submits the script (expected.yaml's ``user``, else its default)."""
    return str(CASES[name].get("user", EXPECTED["user"]))
