"""Kernel messages that are not Xid lines: replay.kernel and checks.kernel.

Every log below is constructed; not a real capture: written for these tests in the
driver's wording, one message per fault the module documents.
"""

from __future__ import annotations

from slurm_ml.health.checks import Expectations, Finding, Severity, Thresholds, check_node
from slurm_ml.health.probe_replay import build_snapshot
from slurm_ml.health.replay.kernel import parse_fabricmanager_log, parse_kernel_events
from slurm_ml.health.snapshot import Gpu, NodeSnapshot

S = Severity
OFF = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."


def kernel_findings(text: str, gpus: tuple[Gpu, ...] = (),
                    scope: set[int] | None = None) -> list[Finding]:
    """The kernel.* findings of a node whose only capture is ``text``, read as a log."""
    snap = NodeSnapshot(node="n1", gpus=gpus, xids=(), kernel_events=parse_kernel_events(text))
    found = check_node(snap, Expectations(gpu_count=len(gpus)), Thresholds(), gpus=scope)
    return [f for f in found if f.check_id.startswith("kernel.")]


def triples(findings: list[Finding]) -> list[tuple[str, Severity, int | None]]:
    return [(f.check_id, f.severity, f.gpu) for f in findings]


# ------------------------------------------------------------ fallen off the bus


def test_fallen_off_bus_in_every_log_format() -> None:
    # constructed; not a real capture
    lines = {
        "dmesg": f"[ 1234.567890] {OFF}",
        "dmesg -T": f"[Tue Mar  3 10:00:00 2026] {OFF}",
        "journal": f"Mar 03 10:00:00 host kernel: {OFF}",
        "iso": f"2026-03-03T10:00:00,123456+00:00 host kernel: {OFF}",
        "bare": OFF,
    }
    for fmt, line in lines.items():
        events = parse_kernel_events(line)
        assert [(e.kind, e.pci_bus_id) for e in events] == [
            ("fallen_off_bus", "0000:3b:00.0")], fmt
        found = kernel_findings(line)
        assert triples(found) == [("kernel.fallen_off_bus", S.DRAIN_NOW, None)], fmt
        assert found[0].evidence["pci_bus_id"] == "0000:3b:00.0", fmt


def test_fallen_off_bus_on_a_listed_gpu_is_that_gpus() -> None:
    # constructed; not a real capture
    gpus = (Gpu(index=0, pci_bus_id="00000000:1A:00.0"),
            Gpu(index=1, pci_bus_id="00000000:3B:00.0"))
    found = kernel_findings(f"[  99.000001] {OFF}", gpus)
    assert triples(found) == [("kernel.fallen_off_bus", S.DRAIN_NOW, 1)]
    assert "0000:3b:00.0" in str(found[0].evidence["sample"])


OLD_DRIVER = (
    "NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1db4)\n"
    "NVRM: installed in this system has fallen off the bus and is not responding to "
    "commands.\n"
)


def test_two_line_old_driver_form_takes_the_address_of_the_first_line() -> None:
    # constructed; not a real capture
    stamped = "".join(f"[  50.00000{i}] {line}\n"
                      for i, line in enumerate(OLD_DRIVER.splitlines()))
    for text in (OLD_DRIVER, stamped):
        events = parse_kernel_events(text)
        assert [(e.kind, e.pci_bus_id) for e in events] == [
            ("fallen_off_bus", "0000:02:00.0")]
        found = kernel_findings(text)
        assert triples(found) == [("kernel.fallen_off_bus", S.DRAIN_NOW, None)]
        assert found[0].evidence["pci_bus_id"] == "0000:02:00.0"


def test_two_line_form_with_indented_continuation_and_no_timestamp() -> None:
    # constructed; not a real capture
    text = ("NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1db4)\n"
            "    NVRM: installed in this system has fallen off the bus and is not\n"
            "    NVRM: responding to commands.\n")
    events = parse_kernel_events(text)
    assert [(e.kind, e.pci_bus_id) for e in events] == [("fallen_off_bus", "0000:02:00.0")]
    found = kernel_findings(text)
    assert triples(found) == [("kernel.fallen_off_bus", S.DRAIN_NOW, None)]
    assert found[0].evidence["pci_bus_id"] == "0000:02:00.0"


def test_a_line_between_ends_the_continuation() -> None:
    # constructed; not a real capture
    text = ("NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1db4)\n"
            "usb 1-1: new high-speed USB device number 2\n"
            "NVRM: installed in this system has fallen off the bus and is not responding to "
            "commands.\n")
    assert [(e.kind, e.pci_bus_id) for e in parse_kernel_events(text)] == [
        ("fallen_off_bus", None)]


# ------------------------------------------------------------ init and probe failures


def test_rm_init_adapter_failed_and_rm_init_adapter() -> None:
    # constructed; not a real capture
    text = ("[   12.100000] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)\n"
            "[   12.100100] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor "
            "number 0\n")
    events = parse_kernel_events(text)
    assert [(e.kind, e.pci_bus_id) for e in events] == [
        ("init_failed", "0000:01:00.0"), ("init_failed", "0000:01:00.0")]
    found = kernel_findings(text)
    assert triples(found) == [("kernel.init_failed", S.DRAIN_NOW, None)]
    assert found[0].evidence["pci_bus_id"] == "0000:01:00.0"
    assert found[0].evidence["count"] == 2


def test_rm_init_adapter_continuation_without_address() -> None:
    # constructed; not a real capture
    text = ("[   12.100000] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)\n"
            "[   12.100100] NVRM: rm_init_adapter failed, device minor number 0\n")
    events = parse_kernel_events(text)
    assert [(e.kind, e.pci_bus_id) for e in events] == [
        ("init_failed", "0000:01:00.0"), ("init_failed", "0000:01:00.0")]


def test_probe_routine_failed() -> None:
    # constructed; not a real capture
    text = "[    8.000000] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
    events = parse_kernel_events(text)
    assert [(e.kind, e.pci_bus_id) for e in events] == [("probe_failed", None)]
    found = kernel_findings(text)
    assert triples(found) == [("kernel.probe_failed", S.DRAIN_NOW, None)]
    assert found[0].evidence["pci_bus_id"] is None


def test_probe_with_driver_nvidia_failed() -> None:
    # constructed; not a real capture
    text = "[    7.900000] nvidia 0000:01:00.0: probe with driver nvidia failed with error -1\n"
    events = parse_kernel_events(text)
    assert [(e.kind, e.pci_bus_id) for e in events] == [("probe_failed", "0000:01:00.0")]
    found = kernel_findings(text)
    assert triples(found) == [("kernel.probe_failed", S.DRAIN_NOW, None)]
    assert found[0].evidence["pci_bus_id"] == "0000:01:00.0"


# ------------------------------------------------------------ GSP timeout


def test_gsp_timeout_banner_takes_the_address_printed_after_it() -> None:
    # constructed; not a real capture
    text = ("[ 4000.000001] NVRM: _kgspLogXid119: ********************************* GSP "
            "Timeout **********************************\n"
            "[ 4000.000002] NVRM: _kgspLogXid119: Note: Please also check logs above.\n"
            "[ 4000.000003] NVRM: GPU at PCI:0000:0b:00: "
            "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9\n")
    events = parse_kernel_events(text)
    # each banner line is the timeout's; all take the address the driver prints after them
    assert [(e.kind, e.pci_bus_id) for e in events] == [("gsp_timeout", "0000:0b:00")] * 2
    gpus = (Gpu(index=0, pci_bus_id="00000000:0B:00.0"),)
    assert triples(kernel_findings(text, gpus)) == [("kernel.gsp_timeout", S.DRAIN_NOW, 0)]
    found = kernel_findings(text)
    assert triples(found) == [("kernel.gsp_timeout", S.DRAIN_NOW, None)]
    assert found[0].evidence["pci_bus_id"] == "0000:0b:00"


# ------------------------------------------------------------ PCIe AER


def test_aer_of_an_nvidia_device() -> None:
    # constructed; not a real capture
    cases = {
        "nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
        "(Receiver ID)": ("pcie_aer_corrected", S.FLAG),
        "nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), "
        "type=Transaction Layer, (Requester ID)": ("pcie_aer_uncorrected", S.DRAIN_AFTER_JOB),
        "nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), "
        "type=Transaction Layer, (Receiver ID)": ("pcie_aer_fatal", S.DRAIN_NOW),
    }
    for body, (kind, sev) in cases.items():
        line = f"[ 700.000000] {body}"
        assert [(e.kind, e.pci_bus_id) for e in parse_kernel_events(line)] == [
            (kind, "0000:3b:00.0")], body
        found = kernel_findings(line)
        assert triples(found) == [(f"kernel.{kind}", sev, None)], body
        assert found[0].evidence["pci_bus_id"] == "0000:3b:00.0"


def test_aer_of_a_pcieport_is_ignored_unless_it_names_nvidia() -> None:
    # constructed; not a real capture
    port = ("[ 700.000000] pcieport 0000:00:03.1: AER: Corrected error received: "
            "0000:04:00.0\n"
            "[ 700.000001] pcieport 0000:00:03.1: AER: PCIe Bus Error: severity=Corrected, "
            "type=Data Link Layer, (Transmitter ID)\n")
    assert parse_kernel_events(port) == ()
    assert kernel_findings(port) == []
    nvidia = ("[ 700.000002] nvidia 0000:3b:00.0: AER: PCIe Bus Error: "
              "severity=Uncorrected (Fatal), type=Inaccessible, (Unregistered Agent ID)\n")
    assert [(e.kind, e.pci_bus_id) for e in parse_kernel_events(port + nvidia)] == [
        ("pcie_aer_fatal", "0000:3b:00.0")]


# ------------------------------------------------------------ NVSwitch SXid


def test_sxid_fatal_and_non_fatal() -> None:
    # constructed; not a real capture
    fatal = ("[ 900.000000] nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 24007, Fatal, Link 44 "
             "sourcetrack timeout error (First)\n")
    nonfatal = ("[ 900.000001] nvidia-nvswitch0: SXid (PCI:0000:84:00.0): 20034, Non-fatal, "
                "Link 30 LTSSM Fault Up\n")
    assert [(e.kind, e.pci_bus_id) for e in parse_kernel_events(fatal + nonfatal)] == [
        ("nvswitch_fatal", "PCI:0000:86:00.0"), ("nvswitch_sxid", "PCI:0000:84:00.0")]
    found = kernel_findings(fatal)
    assert triples(found) == [("kernel.nvswitch_fatal", S.DRAIN_NOW, None)]
    assert found[0].evidence["pci_bus_id"] == "PCI:0000:86:00.0"
    found = kernel_findings(nonfatal)
    assert triples(found) == [("kernel.nvswitch_sxid", S.FLAG, None)]
    assert found[0].evidence["pci_bus_id"] == "PCI:0000:84:00.0"


def test_an_xid_79_line_is_not_a_kernel_event() -> None:
    # constructed; not a real capture
    text = ("[ 1234.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
            "GPU has fallen off the bus.\n")
    assert parse_kernel_events(text) == ()


def test_faults_of_two_gpus_name_both() -> None:
    # constructed; not a real capture
    text = ("[ 300.000000] NVRM: Xid (PCI:0000:1a:00): 48, pid=999, name=train, An "
            "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
            "at partition 6, subpartition 0.\n"
            "[ 301.000000] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x25:0x65:1489)\n")
    assert [(e.kind, e.pci_bus_id) for e in parse_kernel_events(text)] == [
        ("init_failed", "0000:3b:00.0")]
    snap = build_snapshot([("dmesg.txt", text)])
    found = check_node(snap, Expectations(gpu_count=0), Thresholds())
    got = {(f.check_id, f.severity, f.gpu, str(f.evidence.get("pci_bus_id"))) for f in found
           if f.check_id.startswith(("xid.", "kernel."))}
    assert ("kernel.init_failed", S.DRAIN_NOW, None, "0000:3b:00.0") in got
    assert any(c == "xid.48" and s == S.DRAIN_NOW and "1a" in bus for c, s, _, bus in got), got


# ------------------------------------------------------------ check_node via build_snapshot


SMI_Q_TWO = """\
==============NVSMI LOG==============

Timestamp                                 : Tue Mar  3 10:00:00 2026
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 2
GPU 00000000:1A:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    GPU UUID                              : GPU-11111111-2222-3333-4444-555555555555
GPU 00000000:3B:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    GPU UUID                              : GPU-66666666-7777-8888-9999-aaaaaaaaaaaa
"""


def test_fallen_off_bus_next_to_xid_79_gives_only_the_xid() -> None:
    # constructed; not a real capture
    log = ("[ 1234.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has "
           "fallen off the bus.\n"
           f"[ 1234.000100] {OFF}\n")
    snap = build_snapshot([("dmesg.txt", log)])
    found = check_node(snap, Expectations(gpu_count=0), Thresholds())
    ids = [(f.check_id, f.severity) for f in found if f.check_id.startswith(("xid", "kernel"))]
    assert ids == [("xid.79", S.DRAIN_NOW)]


def test_kernel_events_outside_the_job_scope_are_skipped() -> None:
    # constructed; not a real capture
    log = f"[ 10.000000] {OFF}\n"
    snap = build_snapshot([("q.txt", SMI_Q_TWO), ("dmesg.txt", log)])
    exp = Expectations(gpu_count=2)
    out = [f for f in check_node(snap, exp, Thresholds(), gpus=[0])
           if f.check_id.startswith("kernel.")]
    assert out == []
    out = [f for f in check_node(snap, exp, Thresholds(), gpus=[1])
           if f.check_id.startswith("kernel.")]
    assert triples(out) == [("kernel.fallen_off_bus", S.DRAIN_NOW, 1)]


def test_an_address_no_listed_gpu_has_stays_node_level() -> None:
    # constructed; not a real capture
    log = "[ 10.000000] NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.\n"
    snap = build_snapshot([("q.txt", SMI_Q_TWO), ("dmesg.txt", log)])
    found = [f for f in check_node(snap, Expectations(gpu_count=2), Thresholds())
             if f.check_id.startswith("kernel.")]
    assert triples(found) == [("kernel.fallen_off_bus", S.DRAIN_NOW, None)]
    assert found[0].evidence["pci_bus_id"] == "0000:5e:00.0"


FM_FAILED = """\
● nvidia-fabricmanager.service - NVIDIA fabric manager service
     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled)
     Active: failed (Result: exit-code) since Tue 2026-03-03 10:00:00 UTC
Mar 03 10:00:00 host systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE
Mar 03 10:00:00 host systemd[1]: nvidia-fabricmanager.service failed.
"""  # constructed; not a real capture
FM_NOTHING = FM_FAILED.replace(
    "Mar 03 10:00:00 host systemd[1]: nvidia-fabricmanager.service failed.",
    "Mar 03 10:00:00 host nv-fabricmanager[812]: request to query NVSwitch device "
    "information from NVSwitch driver failed with error:WARNING Nothing to do "
    "[NV_WARN_NOTHING_TO_DO]\n"
    "Mar 03 10:00:00 host systemd[1]: nvidia-fabricmanager.service failed.")


def test_fabricmanager_failed_drains_nothing_to_do_only_flags() -> None:
    # constructed; not a real capture
    assert [e.kind for e in parse_fabricmanager_log(FM_FAILED)] == ["fabricmanager_failed"]
    assert [e.kind for e in parse_fabricmanager_log(FM_NOTHING)] == ["fabricmanager_idle"]
    for text, want in ((FM_FAILED, ("kernel.fabricmanager_failed", S.DRAIN_NOW, None)),
                       (FM_NOTHING, ("kernel.fabricmanager_idle", S.FLAG, None))):
        snap = build_snapshot([("fm.log", text)], node="n1")
        found = [f for f in check_node(snap, Expectations(gpu_count=0), Thresholds())
                 if f.check_id.startswith("kernel.")]
        assert triples(found) == [want]
        assert found[0].evidence["pci_bus_id"] is None
