"""``sim --report`` after a long simulation: a failed chart or section is a note, never a
traceback; the pre-check names what to install; the charts stay readable for many teams."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_sim_metrics import tiny  # tests/unit is on sys.path (rootdir import mode)

from slurm_ml.sim import report, report_charts
from slurm_ml.sim.metrics import Summary, summarize
from slurm_ml.sim.report import check_report_deps, write_report
from slurm_ml.sim.report_charts import CHARTS, MARKERS, PALETTE, TraceClock, team_styles
from slurm_ml.sim.result import CycleSample, JobOutcome, SimResult
from slurm_ml.sim.workload import SMALL

PNG = b"\x89PNG\r\n\x1a\n"


def many_teams(n: int, policy: str = "fifo") -> SimResult:
    """A synthetic run (not a trace) with ``n`` teams, each owed and delivered something."""
    teams = [f"team{i:02d}" for i in range(n)]
    jobs = tuple(
        JobOutcome(
            i, t, SMALL, 1, submit_s=10.0 * i, start_s=10.0 * i + i, end_s=900.0, run_s=800.0
        )
        for i, t in enumerate(teams)
    )
    samples = tuple(
        CycleSample(
            float(k * 100),
            {t: 1 for t in teams},
            {},
            free_gpus=0,
            fragmented_gpus=0,
            owed_gpu_h={t: (k + 1) * 1.0 for t in teams},
            delivered_gpu_h={t: (k + 1) * (0.5 + i / n) for i, t in enumerate(teams)},
        )
        for k in range(10)
    )
    return SimResult(
        policy=policy,
        cluster_gpus=n,
        start_s=0,
        end_s=1000,
        jobs=jobs,
        samples=samples,
        team_weights={t: 1.0 for t in teams},
    )


def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every ``import matplotlib...`` fail, as on a machine without it."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("matplotlib", "matplotlib.pyplot", "matplotlib.lines", "matplotlib.patches"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ImportError


def written(tmp_path: Path, results: Sequence[SimResult]) -> tuple[dict[str, Any], str]:
    summaries = [summarize(r) for r in results]
    page = write_report(
        tmp_path,
        results,
        summaries,
        title="t",
        scenario={"trace": "x", "new_knob": {"added": float("inf")}},
    )
    return json.loads((tmp_path / "report.json").read_text()), page.read_text()


def test_pre_check_passes_here_and_names_the_fix_without_matplotlib(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    assert check_report_deps() is None
    assert check_report_deps(tmp_path / "new" / "dir") is None
    assert not (tmp_path / "new").exists()  # checking creates nothing
    no_matplotlib(monkeypatch)
    why = check_report_deps(tmp_path)
    assert why is not None
    assert "matplotlib" in why and "pip install 'matplotlib>=3.7'" in why


def test_pre_check_refuses_a_report_dir_under_a_file(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "f").write_text("")
    why = check_report_deps(tmp_path / "f" / "report")
    assert why is not None and "is not a directory" in why


def test_without_matplotlib_the_report_is_written_with_notes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "occupancy.png").write_bytes(PNG)  # a previous run's: must not be shown
    no_matplotlib(monkeypatch)
    data, page = written(tmp_path, [tiny("fifo"), tiny("budget")])
    assert data["charts"] == []
    assert [f["chart"] for f in data["chart_failures"]] == [n for n, _, _ in CHARTS]
    for f in data["chart_failures"]:
        assert f["error"].startswith(("ImportError", "ModuleNotFoundError")), f
        assert "pip install 'matplotlib>=3.7'" in f["fix"]
    assert [p["policy"] for p in data["policies"]] == ["fifo", "budget"]
    assert data["policies"][0]["summary"] == summarize(tiny("fifo")).as_dict()
    assert data["scenario"]["new_knob"] == {"added": None}
    assert "<img" not in page
    assert page.count('class="note"') == len(CHARTS)
    assert "pip install &#x27;matplotlib&gt;=3.7&#x27;" in page
    assert "Teams under budget" in page and "new_knob" in page
    assert not list(tmp_path.glob("*.png"))


def test_a_chart_that_raises_leaves_the_others_and_the_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")

    def broken(path: Path, results: Sequence[SimResult], summaries: Sequence[Summary],
               clock: TraceClock | None = None) -> None:
        path.write_bytes(b"half a PNG")
        raise RuntimeError("boom <here>")

    charts = (CHARTS[0], ("broken.png", "A chart with a bug", broken), CHARTS[2])
    monkeypatch.setattr(report, "CHARTS", charts)
    data, page = written(tmp_path, [tiny("fifo")])
    assert data["charts"] == [CHARTS[0][0], CHARTS[2][0]]
    (failure,) = data["chart_failures"]
    assert failure["chart"] == "broken.png"
    assert failure["error"] == "RuntimeError: boom <here>"
    assert "please report this" in failure["fix"]
    assert not (tmp_path / "broken.png").exists()
    assert (tmp_path / CHARTS[0][0]).read_bytes().startswith(PNG)
    assert f'<img src="{CHARTS[2][0]}"' in page and '<img src="broken.png"' not in page
    assert "RuntimeError: boom &lt;here&gt;" in page


def test_a_section_that_raises_becomes_a_note(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def targets(s: Summary, baseline: Summary | None = None) -> list[Any]:
        raise KeyError("a measure renamed under us")

    monkeypatch.setattr(report, "targets", targets)
    monkeypatch.setattr(report, "CHARTS", ())
    data, page = written(tmp_path, [tiny("fifo")])
    assert "KeyError" in data["policies"][0]["error"]["error"]
    assert '<h2>Outcome targets</h2>\n<p class="note">' in page
    assert "Teams under fifo" in page and "How the numbers are defined" in page


def test_files_that_cannot_be_written_are_named_not_raised(tmp_path: Path) -> None:
    under_a_file = tmp_path / "f"
    under_a_file.write_text("x")
    lost: list[str] = []
    r = tiny("fifo")
    write_report(under_a_file / "out", [r], [summarize(r)], title="t", scenario={},
                 unwritten=lost)
    assert lost == [str(under_a_file / "out")]

    (tmp_path / "index.html").mkdir()  # the page cannot be written over a directory
    lost.clear()
    write_report(tmp_path, [r], [summarize(r)], title="t", scenario={}, unwritten=lost)
    assert lost == [str(tmp_path / "index.html")] and (tmp_path / "report.json").is_file()


def test_extra_summary_fields_reach_report_json_as_valid_json(tmp_path: Path) -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Wider(Summary):
        new_measure: float = math.nan

        def as_dict(self) -> dict[str, Any]:
            return {**Summary.as_dict(self), "new_measure": self.new_measure}

    r = tiny("fifo")
    s = summarize(r)
    wide = Wider(**{f.name: getattr(s, f.name) for f in dataclasses.fields(Summary)})
    write_report(tmp_path, [r], [wide], title="t", scenario={})
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["policies"][0]["summary"]["new_measure"] is None


def test_fifteen_teams_get_fifteen_distinct_styles_everywhere() -> None:
    s15 = summarize(many_teams(15))
    styles = team_styles([s15])
    assert len(styles) == 15
    assert len({(st.colour, st.marker) for st in styles.values()}) == 15  # lines
    assert len({(st.colour, st.hatch) for st in styles.values()}) == 15  # stacked areas
    # The same team looks the same whichever summaries (policies) the chart is given.
    fewer = dataclasses.replace(s15, teams=s15.teams[3:])
    assert team_styles([fewer, s15]) == styles
    many = team_styles([summarize(many_teams(60))])
    assert len({(st.colour, st.marker) for st in many.values()}) == 60
    assert len({(st.colour, st.hatch) for st in many.values()}) == 60
    assert len(set(PALETTE)) == len(PALETTE) and math.gcd(len(PALETTE), len(MARKERS)) == 1


#: Machado, Oliveira and Fernandes (2009), severity 1.0, on linear RGB: how each
#: dichromacy sees a colour.
_CVD = {
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                   (-0.003882, -0.048116, 1.051998)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602),
                   (0.004733, 0.691367, 0.303900)),
    "normal vision": ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)),
}


def _lab(hex_colour: str, vision: tuple[tuple[float, ...], ...]) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB colour as a reader with ``vision`` sees it."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    rgb = [linear(int(hex_colour[i:i + 2], 16) / 255) for i in (1, 3, 5)]
    r, g, b = (min(1.0, max(0.0, sum(m * c for m, c in zip(row, rgb, strict=True))))
               for row in vision)
    x, y, z = (0.4124 * r + 0.3576 * g + 0.1805 * b, 0.2126 * r + 0.7152 * g + 0.0722 * b,
               0.0193 * r + 0.1192 * g + 0.9505 * b)

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x / 0.95047), f(y), f(z / 1.08883)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


@pytest.mark.parametrize("vision", sorted(_CVD))
def test_the_palette_stays_apart_for_colour_blind_readers(vision: str) -> None:
    # tab20, the old palette, falls to a distance of 1.2 under protanopia; 12 is a
    # difference a reader sees at a glance on a chart
    labs = [_lab(c, _CVD[vision]) for c in PALETTE]
    closest = min(math.dist(p, q) for p, q in itertools.combinations(labs, 2))
    assert closest > 12, f"two team colours look alike under {vision} (delta E {closest:.1f})"


def test_charts_share_y_scales_keep_legends_outside_and_say_ai2s_ratio(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figures: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    results = [many_teams(15, "fifo"), many_teams(15, "budget")]
    summaries = [summarize(r) for r in results]
    for _, _, draw in CHARTS:
        draw(tmp_path / "x.png", results, summaries)
    owed, waits, occupancy, idle = figures
    for fig in figures:
        assert fig.legends, "one legend for the figure"
        assert all(ax.get_legend() is None for ax in fig.axes), "no legend inside an axes"
    (team_legend,) = owed.legends
    labels = [t.get_text() for t in team_legend.get_texts()]
    assert labels[:15] == [f"team{i:02d}" for i in range(15)]
    grid = [[owed.axes[0], owed.axes[1]], [owed.axes[2], owed.axes[3]]]
    for col in (0, 1):
        assert grid[0][col].get_shared_y_axes().joined(grid[0][col], grid[1][col])
    assert "Ai2's ratio" in grid[0][1].get_title()
    assert "warm-up" in occupancy.axes[0].get_title()
    assert "free while jobs waited" in idle.axes[0].get_title()
    (stack_legend,) = occupancy.legends  # top to bottom, as stacked
    assert [t.get_text() for t in stack_legend.get_texts()] == labels[:15][::-1]
    top, bottom = occupancy.axes
    assert top.get_shared_y_axes().joined(top, bottom)
    assert waits.axes[0].get_shared_y_axes().joined(waits.axes[0], waits.axes[3])
    lines = [ln for ln in grid[0][1].get_lines() if ln.get_marker() not in ("None", None, "")]
    assert len({(ln.get_color(), ln.get_marker()) for ln in lines}) == 15


def test_real_pngs_for_fifteen_teams(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    data, page = written(tmp_path, [many_teams(15, "fifo"), many_teams(15, "budget")])
    assert data["chart_failures"] == []
    for name, _, _ in CHARTS:
        assert (tmp_path / name).read_bytes().startswith(PNG)
        assert f'<img src="{name}"' in page


def test_report_charts_module_still_imports_without_matplotlib() -> None:
    assert report_charts.text("$x") == r"\$x"
