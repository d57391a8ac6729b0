"""Writing the textfile (``health.textfile_write``): where, readable by node_exporter, and
the leftovers of a writer killed mid-write cleaned up by the next one.

A killed writer is a real child process running the real writer, whose registry blocks
while it is collected: prometheus_client opens the temporary file first, so the child
is killed with the file open, as SIGKILL or the hook wrapper's ``timeout`` would.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from slurm_ml.health.textfile import NodeHealth, render
from slurm_ml.health.textfile_write import remove_leftovers, textfile_path, write_textfile

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def registry(node: str = "gpu01", passed: bool = True) -> CollectorRegistry:
    return render(NodeHealth(node, NOW, "pass" if passed else "drained", passed, 1.0))


def values(path: Path) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(path.read_text())
            for s in f.samples if s.name == "slurm_ml_node_health_pass"}


def test_one_file_per_node_named_for_node_exporter(tmp_path: Path) -> None:
    a = write_textfile(tmp_path, "gpu01", registry("gpu01"))
    b = write_textfile(tmp_path, "gpu02", registry("gpu02", passed=False))
    assert (a.name, b.name) == ("slurm-ml-gpu01.prom", "slurm-ml-gpu02.prom")
    assert sorted(p.name for p in tmp_path.iterdir()) == [a.name, b.name]  # no temp left
    assert values(a) == {"slurm_ml_node_health_pass": 1}
    assert values(b) == {"slurm_ml_node_health_pass": 0}
    write_textfile(tmp_path, "gpu01", registry("gpu01", passed=False))
    assert values(a) == {"slurm_ml_node_health_pass": 0}


def test_a_node_name_never_escapes_the_directory() -> None:
    d = Path("/x")
    assert textfile_path(d, "../etc/passwd").parent == d
    assert textfile_path(d, "gpu 01/x").name == "slurm-ml-gpu_01_x.prom"
    assert textfile_path(d, "").name == "slurm-ml-_.prom"


@pytest.fixture
def strict_umask() -> Iterator[None]:
    old = os.umask(0o077)  # as a daemon might hand its hooks
    yield
    os.umask(old)


@pytest.mark.usefixtures("strict_umask")
def test_the_file_is_readable_by_node_exporters_user(tmp_path: Path) -> None:
    path = write_textfile(tmp_path, "gpu01", registry())
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.umask(0o077) == 0o077  # the hook's own umask is given back


def test_an_unwritable_directory_raises_and_keeps_the_old_file(tmp_path: Path) -> None:
    path = write_textfile(tmp_path, "gpu01", registry())
    with pytest.raises(OSError):
        write_textfile(tmp_path / "gone", "gpu01", registry(passed=False))
    assert values(path) == {"slurm_ml_node_health_pass": 1}


class _Looks:
    """Collected while the temporary file is open: records what the directory holds."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.seen: list[str] = []

    def collect(self) -> Iterator[Metric]:
        self.seen = sorted(p.name for p in self.directory.iterdir())
        yield GaugeMetricFamily("slurm_ml_test", "test", value=1)


def test_the_temporary_file_is_never_a_prom_file(tmp_path: Path) -> None:
    """What node_exporter could see mid-write: the library's own temporary name, which
    the leftover rule must recognise, and which must not end in .prom."""
    reg = registry()
    probe = _Looks(tmp_path)
    reg.register(probe)
    write_textfile(tmp_path, "gpu01", reg)
    [temp] = probe.seen
    assert temp.startswith("slurm-ml-gpu01.prom.") and not temp.endswith(".prom")
    assert temp == f"slurm-ml-gpu01.prom.{os.getpid()}.{temp.rsplit('.', 1)[1]}"


_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily
    from slurm_ml.health.textfile_write import write_textfile

    class Hang:
        def collect(self):
            print("writing", flush=True)
            time.sleep(60)
            yield GaugeMetricFamily("slurm_ml_test", "test", value=1)

    reg = CollectorRegistry()
    reg.register(Hang())
    write_textfile(Path(sys.argv[1]), "gpu01", reg)
""")


def _killed_mid_write(directory: Path) -> list[str]:
    """Run the real writer in a child, SIGKILL it while its temporary file is open; the
    names in ``directory`` afterwards."""
    env = os.environ | {"PYTHONPATH": str(REPO)}
    with subprocess.Popen([sys.executable, "-c", _CHILD, str(directory)], env=env,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == "writing\n"
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    return sorted(p.name for p in directory.iterdir())


def test_a_killed_writers_leftover_is_removed_by_the_next_write(tmp_path: Path) -> None:
    path = write_textfile(tmp_path, "gpu01", registry())
    names = _killed_mid_write(tmp_path)
    [leftover] = [n for n in names if n != path.name]
    assert leftover.startswith(path.name + ".")
    assert values(path) == {"slurm_ml_node_health_pass": 1}  # the rename never happened

    write_textfile(tmp_path, "gpu01", registry(passed=False))

    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert values(path) == {"slurm_ml_node_health_pass": 0}


def test_only_dead_writers_leftovers_of_this_node_go(tmp_path: Path) -> None:
    path = textfile_path(tmp_path, "gpu01")
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    dead = f"{path.name}.{pid_max + 1}.140"  # no process has that pid
    live = f"{path.name}.{os.getppid()}.140"  # another writer, still at it
    other = f"slurm-ml-gpu02.prom.{pid_max + 1}.140"  # another node's: its own writer's
    keep = [live, other, "slurm-ml-gpu02.prom", "node.prom", f"{path.name}.bak"]
    for name in [dead, *keep]:
        (tmp_path / name).write_text("")
    assert remove_leftovers(path) == [tmp_path / dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
