"""NVLink and NVSwitch fabric: active links, topology, error counters, fabric state."""

from __future__ import annotations

from collections.abc import Collection

from slurm_ml.health.checks._common import Out, join, label, num, text, unsupported
from slurm_ml.health.checks.findings import Severity
from slurm_ml.health.snapshot import Gpu, NodeSnapshot, NvLink

S = Severity


def _links(gpu: Gpu) -> tuple[NvLink, ...] | None:
    return gpu.nvlinks if isinstance(gpu.nvlinks, tuple) else None


def active_links(gpu: Gpu, out: Out) -> None:
    """Active links below the class's count drain (DCGM link-down FAIL, Azure NHC2016,
    research §2.4). A link whose state is NOT_SUPPORTED is not a link of this GPU."""
    want = out.exp.nvlink_links_per_gpu
    if want == 0:
        return
    if gpu.nvlinks is None:
        out.miss("nvlink.active_links", gpu, "nvlinks")
        return
    links = _links(gpu)
    no_nvlink = links is None  # NOT_SUPPORTED on a GPU whose class has NVLink
    if links is None:
        if gpu.mig_enabled is True:
            return  # MIG: NVLink is not used and may read N/A (open question)
        links = ()
    real = [link for link in links if not unsupported(link.active)]
    up = sorted(link.link for link in real if link.active is True)
    down = sorted(link.link for link in real if link.active is False)
    unknown = sorted(link.link for link in real if link.active is None)
    # Missing evidence never drains: with unread states, drain only when a link is seen
    # down and even counting every unread one as up the GPU falls short.
    short = len(up) + len(unknown) < want
    if short and (not unknown or down):
        why = ("NVML reports no NVLink on it" if no_nvlink
               else f"down: {join(down)}" if down else f"{len(real)} links enumerated")
        out.add("nvlink.active_links", S.DRAIN_NOW, gpu,
                f"{label(gpu)} has {len(up)} of {want} NVLink links active ({why}); drain, "
                f"check the fabric manager and NVSwitch, and reboot to retrain the links.",
                f"{len(up)}/{want} active", active=len(up), expected=want, inactive=down,
                unknown=unknown, links_seen=len(real))
    elif unknown:
        out.miss("nvlink.active_links", gpu, "nvlinks.active")


def errors(gpu: Gpu, prev: Gpu, out: Out) -> None:
    """Replay/recovery/CRC counters that grew since the previous snapshot (DCGM: replay or
    recovery delta >= 1 fails, CRC only at >= 100/s; docs/design.md: flag)."""
    now, then = _links(gpu), _links(prev)
    if now is None or then is None:
        if out.exp.nvlink_links_per_gpu and (gpu.nvlinks is None or prev.nvlinks is None):
            out.miss("nvlink.errors", gpu, "nvlinks")
        return
    before = {link.link: link for link in then}
    deltas: dict[str, dict[int, int]] = {"replay": {}, "recovery": {}, "crc": {}}
    compared = unread = 0
    for link in now:
        old = before.get(link.link)
        if old is None:
            continue
        for kind, per_link in deltas.items():
            a, b = getattr(link, f"{kind}_errors"), getattr(old, f"{kind}_errors")
            if unsupported(a) or unsupported(b):
                continue
            x, y = num(a), num(b)
            if x is None or y is None:
                unread += 1
                continue
            compared += 1
            if x > y:  # smaller: the counters were reset (reboot, driver reload)
                per_link[link.link] = x - y
    if unread and not compared:
        out.miss("nvlink.errors", gpu, "nvlinks.error_counters")
        return
    rr = sum(deltas["replay"].values()) + sum(deltas["recovery"].values())
    crc = sum(deltas["crc"].values())
    th = out.th
    if rr >= th.nvlink_replay_recovery_delta or crc >= th.nvlink_crc_delta:
        bad = sorted({k for d in deltas.values() for k in d})
        out.add("nvlink.errors", th.nvlink_errors, gpu,
                f"{label(gpu)} logged {rr} NVLink replay/recovery and {crc} CRC error(s) on "
                f"link(s) {join(bad)} since the previous check; watch the link and reseat or "
                f"replace it if the count keeps growing.", f"+{rr} replay/rec +{crc} crc",
                replay_recovery=rr, crc=crc,
                per_link={str(k): {kind: d[k] for kind, d in deltas.items() if k in d}
                          for k in bad},
                thresholds={"replay_recovery": th.nvlink_replay_recovery_delta,
                            "crc": th.nvlink_crc_delta})


def fabric(gpu: Gpu, out: Out) -> None:
    """NVSwitch fabric (Hopper+ HGX): state must be Completed and status Success
    (azhpc-images verify_nvlink_setup, research §1.2; NVML: status only counts once the
    state is complete)."""
    if unsupported(gpu.fabric_state):
        return  # pre-Hopper, PCIe cards: no fabric state
    state = text(gpu.fabric_state)
    if state is None:
        if out.exp.nvlink_links_per_gpu:
            out.miss("fabric.state", gpu, "fabric_state")
        return
    if state.strip().lower() != "completed":
        out.add("fabric.state", S.DRAIN_NOW, gpu,
                f"{label(gpu)} has NVSwitch fabric state '{state}' instead of Completed; its "
                f"NVLink traffic cannot flow: drain, check nvidia-fabricmanager, reboot.",
                f"fabric {state}", state=state, status=text(gpu.fabric_status))
        return
    health = text(gpu.fabric_health)
    if health is not None and health.strip().lower() not in ("healthy", "unknown"):
        out.add("fabric.health", S.DRAIN_NOW, gpu,
                f"{label(gpu)} joined the NVLink fabric but its health summary reads "
                f"'{health}'; multi-node NVLink traffic may fail or run degraded: drain, "
                f"check nvidia-fabricmanager / the NVLink switch trays, reboot.",
                f"fabric health {health}", state=state, status=text(gpu.fabric_status),
                health=health)
    if unsupported(gpu.fabric_status):
        return
    status = text(gpu.fabric_status)
    if status is None:
        out.miss("fabric.state", gpu, "fabric_status")
    elif status.strip().lower() != "success":
        out.add("fabric.state", S.DRAIN_NOW, gpu,
                f"{label(gpu)} joined the NVSwitch fabric with status '{status}' instead of "
                f"Success; drain, check nvidia-fabricmanager, reboot.",
                f"fabric {status}", state=state, status=status)


def bridges(snap: NodeSnapshot, scope: Collection[int], out: Out) -> None:
    """Bridged PCIe pairs: each GPU must reach one partner over ``NV<bridge_links>`` in
    ``topo -m`` (``SYS`` or ``PHB`` to every peer means its bridge is missing or not
    seated; ``NV3`` on a 4-link bridge means a bridge with a link that does not make
    contact). Judged only where ``checks.node.bridged`` turned bridges on."""
    want = out.exp.bridge_links
    if want == 0 or out.exp.nvlink_links_per_gpu != want or snap.topology is None:
        return
    target = f"NV{want}"
    idx = sorted({g.index for g in snap.gpus} | {i for pair in snap.topology for i in pair})
    by_index = {g.index: g for g in snap.gpus}
    for i in idx:
        if i not in scope or i not in by_index:
            continue
        cells = {j: c.strip().upper() for j in idx if j != i
                 if (c := snap.topology.get((i, j)) or snap.topology.get((j, i)))}
        if not cells:
            continue
        if any(c == target for c in cells.values()):
            continue
        nv = {j: c for j, c in cells.items() if c.startswith("NV")}
        seen = "/".join(sorted(set(cells.values())))
        why = (f"its bridge to GPU {join(sorted(nv))} carries {'/'.join(sorted(set(nv.values())))}"
               if nv else f"it reaches every peer over {seen}: no bridge")
        out.add("nvlink.bridge", S.DRAIN_NOW, by_index[i],
                f"{label(by_index[i])} should have an NVLink-bridged partner at {target}, but "
                f"{why}; drain, reseat or replace the NVLink bridge.",
                f"bridge {'/'.join(sorted(set(nv.values()))) if nv else seen} not {target}",
                expected=target, peers=dict(sorted((str(j), c) for j, c in cells.items())))


def topology(snap: NodeSnapshot, scope: Collection[int], out: Out) -> None:
    """Every GPU pair must show the expected ``topo -m`` cell. A mismatched pair is blamed
    on the GPU with the most mismatches (one bad GPU, not all its peers); a tie blames
    both."""
    want = out.exp.expected_topology_cell
    if want is None or len(snap.gpus) < 2:
        return
    by_index = {g.index: g for g in snap.gpus}
    if snap.topology is None:
        for i in sorted(scope):
            if i in by_index:
                out.miss("nvlink.topology", by_index[i], "topology")
        return
    target = want.strip().upper()
    idx = sorted(by_index)
    bad: dict[int, dict[int, str]] = {i: {} for i in idx}
    for n, i in enumerate(idx):
        for j in idx[n + 1:]:
            cells = [c.strip().upper() for c in (snap.topology.get((i, j)),
                                                 snap.topology.get((j, i))) if c is not None]
            if not cells:
                if i in scope or j in scope:
                    out.miss("nvlink.topology", by_index[i if i in scope else j],
                             f"topology {i}-{j}")
                continue
            wrong = next((c for c in cells if c != target), None)
            if wrong is not None:
                bad[i][j], bad[j][i] = wrong, wrong
    for i in idx:
        if i not in scope or not bad[i]:
            continue
        mine = {j: c for j, c in bad[i].items() if len(bad[i]) >= len(bad[j])}
        if not mine:
            continue
        peers = sorted(mine)
        cells = sorted(set(mine.values()))
        detail = (f"gpu{peers[0]} {mine[peers[0]]} not {target}" if len(peers) == 1
                  else f"{len(peers)} peers not {target}")
        out.add("nvlink.topology", S.DRAIN_NOW, by_index[i],
                f"{label(by_index[i])} reaches GPU(s) {join(peers)} over {'/'.join(cells)} "
                f"instead of {target}; its NVLink paths are degraded: drain, check the links "
                f"and the fabric manager, reboot.", detail, expected=target,
                peers={str(j): c for j, c in sorted(mine.items())})
