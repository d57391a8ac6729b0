"""The periodic check's textfile under a real node_exporter (Debian's
prometheus-node-exporter, textfile collector only), with a writer SIGKILLed in the
middle of its write.

Version 1 of ``slurm-ml-gpu01.prom`` is written by the real writer
(``health.textfile_write.write_textfile``). A child process then runs the same writer for
version 2, whose registry carries one family with a very large help text, so that the
write of the file takes a few hundred milliseconds; the child is SIGKILLed once the file
it writes exists and is growing, and the kill is checked to have landed mid-write (the
file is shorter than what the child was writing). node_exporter must then serve
version 1's series exactly, with ``node_textfile_scrape_error 0``, and a clean write of
version 3 must be served next (and remove the killed writer's leftover).

Why this can fail: a writer that wrote the ``.prom`` file in place leaves it torn, and
node_exporter then either fails to parse it (``node_textfile_scrape_error 1``, and that
file's series gone) or serves part of version 2; a writer whose temporary file ended in
``.prom`` would have it read as a second file of the same series. Each breaks "version
1 exactly, error 0". ``test_an_in_place_write_killed_midway_is_what_the_check_catches``
runs the same kill against an in-place writer under the same node_exporter and shows the
check failing on it.

Needs no Slurm: only the binary. It is skipped, naming the package, where it is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.health.textfile import NodeHealth, render
from slurm_ml.health.textfile_write import textfile_path, write_textfile
from slurm_ml.model import Node

REPO = Path(__file__).resolve().parents[2]
NODE_EXPORTER = Path("/usr/bin/prometheus-node-exporter")
NODE = "gpu01"
#: The help text that makes version 2's write long: about 0.3 s at 400 MB/s.
PADDING = 128 << 20
#: The file being written must have grown past this before the kill.
GROWN = 1 << 20
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class Exporter:
    url: str
    directory: Path

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=30) as res:
            text: str = res.read().decode()
            return text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Exporter]:
    if not NODE_EXPORTER.exists():
        pytest.skip(f"{NODE_EXPORTER} is missing: install the Debian package "
                    "prometheus-node-exporter (`slurm-ml devcluster up` does)")
    directory = tmp_path / "textfile"
    directory.mkdir()
    url = f"http://127.0.0.1:{_free_port()}/metrics"
    log = (tmp_path / "node_exporter.log").open("wb")
    proc = subprocess.Popen(
        [str(NODE_EXPORTER), f"--web.listen-address={url.split('/')[2]}",
         "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={directory}"],
        stdout=log, stderr=subprocess.STDOUT)
    exp = Exporter(url, directory)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                exp.scrape()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"node_exporter did not answer: "
                                f"{(tmp_path / 'node_exporter.log').read_text()}")
                time.sleep(0.1)
        yield exp
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def health(version: int) -> NodeHealth:
    """Version 1 passes; 2 and 3 drained the node for an NVLink fault (distinct values)."""
    snap = ReplayProbe.from_files([REPO / "data" / "gpu" / "nvlink" /
                                   "gpud_a100x8_nvlink_status.txt"]).snapshot(NODE)
    drained = version > 1
    node = Node(NODE, "IDLE", frozenset({"DRAIN"}) if drained else frozenset(),
                "slurm-ml: nvlink.active_links gpu6" if drained else "", (), "gpu:8", 8,
                None, 64, 512_000)
    return NodeHealth(NODE, datetime(2026, 11, 30, 12, version, tzinfo=UTC),
                      "drained" if drained else "pass", not drained, 1.0, snapshot=snap,
                      slurm_node=node, gpu_jobs={}, spool_records=version)


def ours(text: str) -> Series:
    """slurm-ml's series in an exposition text, as prometheus_client parses it."""
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("slurm_ml_"):
                out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def problems(scraped: str, want: Series) -> list[str]:
    """What is wrong with what node_exporter served, against the file it should serve."""
    out = []
    errors = [s.value for f in text_string_to_metric_families(scraped) for s in f.samples
              if s.name == "node_textfile_scrape_error"]
    if errors != [0]:
        out.append(f"node_textfile_scrape_error is {errors}, not [0]")
    got = ours(scraped)
    if got != want:
        missing = sorted(set(want) - set(got))[:3]
        extra = sorted(set(got) - set(want))[:3]
        changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])[:3]
        out.append(f"served series differ: missing {missing}, extra {extra}, "
                   f"changed {changed}")
    return out


def write(directory: Path, version: int) -> Series:
    path = write_textfile(directory, NODE, render(health(version)))
    return ours(path.read_text())


_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.exposition import generate_latest
    from slurm_ml.health.textfile import render
    from slurm_ml.health.textfile_write import textfile_path, write_textfile
    from test_textfile_node_exporter import NODE, PADDING, health

    class Padding:
        def collect(self):
            yield GaugeMetricFamily("slurm_ml_test_padding", "x" * PADDING, value=1)

    directory, how = Path(sys.argv[1]), sys.argv[2]
    registry = render(health(2))
    registry.register(Padding())
    if how == "atomic":  # the real writer
        write_textfile(directory, NODE, registry)
    else:  # what the real writer must not be: the file written in place
        textfile_path(directory, NODE).write_bytes(generate_latest(registry))
""")


def kill_mid_write(directory: Path, how: str) -> Path:
    """Run a child writing version 2 (``how``: "atomic" or "in-place"), SIGKILL it while
    the file it writes is growing; the file it was writing, left short. Retried when the
    kill came too late (the child finished first), which a loaded machine may cause."""
    target = textfile_path(directory, NODE)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO), str(Path(__file__).parent)])}
    for _ in range(5):
        with subprocess.Popen([sys.executable, "-c", _CHILD, str(directory), how],
                              env=env) as child:
            watched = None
            while child.poll() is None and watched is None:
                for p in ([target] if how == "in-place"
                          else directory.glob(f"{target.name}.{child.pid}.*")):
                    # A temporary file may be renamed between the glob and the stat.
                    with contextlib.suppress(FileNotFoundError):
                        if GROWN < p.stat().st_size < PADDING:
                            child.send_signal(signal.SIGKILL)
                            watched = p
                time.sleep(0.0005)
            code = child.wait(60)
        if watched is not None and code == -signal.SIGKILL and watched.exists() \
                and watched.stat().st_size < PADDING:
            return watched
        write(directory, 1)  # too late: put version 1 back and try again
    pytest.fail("could not kill the writer in the middle of its write in 5 tries")


@pytest.mark.timeout(240)
def test_a_writer_killed_mid_write_leaves_version_1_served(exporter: Exporter) -> None:
    v1 = write(exporter.directory, 1)
    assert problems(exporter.scrape(), v1) == []

    leftover = kill_mid_write(exporter.directory, "atomic")

    assert leftover.name.startswith("slurm-ml-gpu01.prom.")  # never read: not *.prom
    assert problems(exporter.scrape(), v1) == []

    v3 = write(exporter.directory, 3)

    assert v3 != v1
    assert problems(exporter.scrape(), v3) == []
    assert sorted(p.name for p in exporter.directory.iterdir()) == ["slurm-ml-gpu01.prom"]


@pytest.mark.timeout(240)
def test_an_in_place_write_killed_midway_is_what_the_check_catches(
        exporter: Exporter) -> None:
    """The same kill against a writer that writes the .prom file in place: the check of
    the test above must fail, or that test proves nothing."""
    v1 = write(exporter.directory, 1)
    assert problems(exporter.scrape(), v1) == []

    torn = kill_mid_write(exporter.directory, "in-place")

    assert torn == textfile_path(exporter.directory, NODE)
    assert problems(exporter.scrape(), v1) != []
