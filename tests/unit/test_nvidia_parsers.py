"""rigup/nvidia on real captured output (tests/fixtures; see their READMEs)."""

from pathlib import Path

import pytest

from rigup.nvidia import (
    GPU_QUERY_FIELDS,
    ParseError,
    PowerLimitError,
    diagnose_driver,
    interconnect_env,
    nvlink_count,
    parse_dkms_status,
    parse_driver_state,
    parse_gpu_query,
    parse_nvlink_status,
    parse_p2p_matrix,
    parse_power_limit_answer,
    parse_proc_driver_version,
    parse_secure_boot,
    parse_topology,
    plan_power_limits,
    power_limit_mismatches,
    strip_ansi,
    verify_interconnect,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_topology_with_ansi_escapes_and_tabs():
    text = read("h200x2/topo-m.txt")
    assert "\x1b[4m" in text  # the real capture underlines its header
    topo = parse_topology(text)
    assert topo == {(0, 0): "X", (0, 1): "NV18", (1, 0): "NV18", (1, 1): "X"}
    assert "\x1b" not in strip_ansi(text)


@pytest.mark.parametrize(
    "fixture,cell,links",
    [("rtx3090/topo-m-nv4.txt", "NV4", 4), ("rtx3090/topo-m-phb-no-nvlink.txt", "PHB", 0)],
)
def test_topology_3090(fixture, cell, links):
    topo = parse_topology(read(fixture))
    assert topo[(0, 1)] == topo[(1, 0)] == cell
    assert nvlink_count(cell) == links


def test_topology_without_matrix_is_an_error():
    with pytest.raises(ParseError, match="topo -m"):
        parse_topology("NVIDIA-SMI has failed because it couldn't communicate with the driver")


@pytest.mark.parametrize(
    "fixture,cell",
    [
        ("h200x2/topo-p2p-r.txt", "OK"),
        ("rtx3090/topo-p2p-r-ok.txt", "OK"),
        ("rtx3090/topo-p2p-r-chipset-not-supported.txt", "CNS"),
    ],
)
def test_p2p_matrix(fixture, cell):
    assert parse_p2p_matrix(read(fixture)) == {(0, 0): "X", (0, 1): cell, (1, 0): cell, (1, 1): "X"}


def test_nvlink_status_healthy_and_inactive():
    healthy = parse_nvlink_status(read("rtx3090/nvlink-s-healthy.txt"))
    assert [(g.index, g.active) for g in healthy] == [(0, 4), (1, 4)]
    assert healthy[0].links[0] == 14.062
    assert healthy[1].uuid == "GPU-11111111-1111-1111-1111-111111111111"
    degraded = parse_nvlink_status(read("rtx3090/nvlink-s-one-link-inactive.txt"))
    assert [(g.index, g.active) for g in degraded] == [(0, 3), (1, 3)]
    assert degraded[0].links[3] is None
    h200 = parse_nvlink_status(read("h200x2/nvlink-s.txt"))
    assert [g.active for g in h200] == [18, 18] and h200[0].links[17] == 26.562


def test_gpu_query_with_header_and_units():
    gpus = parse_gpu_query(read("h200x2/query-csv.txt"))
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name == "NVIDIA H200" and gpus[0].driver_version == "580.159.04"
    assert (gpus[0].min_power_limit_w, gpus[0].max_power_limit_w) == (200.0, 700.0)
    capped = parse_gpu_query(read("rtx3090/query-csv-capped-290.txt"))
    assert [g.power_limit_w for g in capped] == [290.0, 290.0]
    assert [g.max_power_limit_w for g in capped] == [350.0, 400.0]  # boards differ


def test_gpu_query_rigup_capture_without_header():
    # captured before compute_cap was queried: the fields of that command
    gpus = parse_gpu_query(read("h200x2-rigup/query-gpu.txt"), GPU_QUERY_FIELDS[:-1])
    assert len(gpus) == 2 and gpus[1].pci_bus_id == "00000000:00:07.0"
    assert gpus[1].persistence_mode == "Enabled" and gpus[1].enforced_power_limit_w == 700.0


def test_gpu_query_not_supported_and_bad_rows():
    row = "0, GPU-x, 00000000:01:00.0, GeForce, 580.1, Disabled, [N/A], [N/A], [N/A], [N/A], [N/A], 8.6"
    assert parse_gpu_query(row)[0].max_power_limit_w is None
    with pytest.raises(ParseError, match="columns"):
        parse_gpu_query("0, GPU-x, 290.00")
    with pytest.raises(ParseError, match="not a power"):
        parse_gpu_query(row.replace("[N/A], [N/A], [N/A], [N/A], [N/A]", "a, b, c, d, e"))
    assert parse_gpu_query(row)[0].compute_capability == "8.6"


def test_power_limit_answers():
    ok = parse_power_limit_answer(read("rtx3090/pl-success.txt"))
    assert ok.ok and ok.set_w == 290.0
    rng = parse_power_limit_answer(read("rtx3090/pl-out-of-range.txt"))
    assert not rng.ok and rng.reason == "out-of-range" and (rng.min_w, rng.max_w) == (100.0, 350.0)
    perm = parse_power_limit_answer(read("rtx3090/pl-insufficient-permissions.txt"))
    assert not perm.ok and perm.reason == "insufficient-permissions"
    # "All done." after a refusal (owners' reports) is still a refusal
    refused = parse_power_limit_answer(
        "Changing power management limit is not supported for GPU: 00000000:01:00.0.\nAll done."
    )
    assert not refused.ok and refused.reason == "not-supported"
    assert not parse_power_limit_answer("All done.").ok


def test_plan_power_limits_checks_each_card():
    gpus = parse_gpu_query(read("rtx3090/query-csv-capped-290.txt"))
    assert set(plan_power_limits(gpus, 290).values()) == {290.0}
    assert list(plan_power_limits(gpus, None).values()) == [350.0, 370.0]  # each card's default
    with pytest.raises(PowerLimitError) as err:
        plan_power_limits(gpus, 380)  # fine for GPU 1 (max 400), not GPU 0 (max 350)
    assert "GPU 0" in str(err.value) and "100-350 W" in str(err.value)
    assert "GPU 1" not in str(err.value)
    with pytest.raises(PowerLimitError, match="outside"):
        plan_power_limits(gpus, 50)


def test_power_limit_readback():
    not_capped = parse_gpu_query(read("rtx3090/query-csv-not-capped.txt"))
    targets = {g.uuid: 290.0 for g in not_capped}
    problems = power_limit_mismatches(not_capped, targets)
    assert len(problems) == 1 and "GPU 0" in problems[0] and "350.0 W" in problems[0]
    assert power_limit_mismatches(not_capped, {"GPU-gone": 290.0}) == [
        "GPU-gone: not found in the read-back"
    ]


def _interconnect(nvlink, topo, p2p, links=4):
    return verify_interconnect(
        parse_nvlink_status(read(nvlink)),
        parse_topology(read(topo)),
        parse_p2p_matrix(read(p2p)),
        gpu_count=2,
        expected_links=links,
    )


def test_interconnect_healthy_3090_bridge():
    result = _interconnect(
        "rtx3090/nvlink-s-healthy.txt", "rtx3090/topo-m-nv4.txt", "rtx3090/topo-p2p-r-ok.txt"
    )
    assert result.verified and result.problems == []
    assert interconnect_env(result) == ({"NCCL_P2P_LEVEL": "NVL"}, [])


def test_interconnect_h200_with_its_expectation():
    result = _interconnect("h200x2/nvlink-s.txt", "h200x2/topo-m.txt", "h200x2/topo-p2p-r.txt", 18)
    assert result.verified, result.problems


def test_interconnect_degraded_link():
    result = _interconnect(
        "rtx3090/nvlink-s-one-link-inactive.txt",
        "rtx3090/topo-m-nv4.txt",
        "rtx3090/topo-p2p-r-ok.txt",
    )
    assert not result.verified and result.p2p_ok and not result.nvlink_ok
    assert "GPU 0: NVLink degraded, 3 of 4 links active (inactive: 3)" in result.problems[0]
    assert "reseat the bridge" in result.problems[0]
    env, args = interconnect_env(result)
    assert env == {"NCCL_P2P_DISABLE": "1"} and args == ["--disable-custom-all-reduce"]


def test_interconnect_missing_bridge_pcie_only():
    no_links = "GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-0)\nGPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-1)\n"
    result = verify_interconnect(
        parse_nvlink_status(no_links),
        parse_topology(read("rtx3090/topo-m-phb-no-nvlink.txt")),
        parse_p2p_matrix(read("rtx3090/topo-p2p-r-chipset-not-supported.txt")),
        gpu_count=2,
        expected_links=4,
    )
    text = " ".join(result.problems)
    assert "no active NVLink" in text and "shows PHB, expected NV4" in text and "CNS" in text
    assert not result.p2p_ok


def test_an_empty_nvlink_status_is_no_bridge_not_a_missing_gpu():
    """Driver 580 prints nothing for `nvidia-smi nvlink --status` without a bridge
    (canonical/checkbox#2617): one sentence, not "check that the driver sees every GPU"."""
    from rigup import diagnosis
    from rigup.nvidia.nvlink import NO_LINKS_AT_ALL

    result = verify_interconnect(
        parse_nvlink_status(""),
        parse_topology(read("rtx3090/topo-m-phb-no-nvlink.txt")),
        parse_p2p_matrix(read("rtx3090/topo-p2p-r-chipset-not-supported.txt")),
        gpu_count=2,
        expected_links=4,
    )
    assert result.problems[0] == NO_LINKS_AT_ALL
    assert NO_LINKS_AT_ALL.startswith("no NVLink links reported at all: no bridge detected")
    assert "driver sees every GPU" not in " ".join(result.problems)
    state = {"required": False, "active": result.active_links, "problems": result.problems}
    (v,) = diagnosis.classify_nvlink(state)
    assert v.what == (
        "no NVLink links reported at all: no bridge detected: tensor parallel runs over PCIe"
    )
    (required,) = diagnosis.classify_nvlink({**state, "required": True})
    assert required.severity == diagnosis.FAIL and required.why.startswith(NO_LINKS_AT_ALL)


def test_proc_version_and_secure_boot():
    assert parse_proc_driver_version(read("h200x2/proc-version.txt")) == ("580.159.04", True)
    assert parse_proc_driver_version("") is None
    assert parse_secure_boot("SecureBoot enabled") is True
    assert parse_secure_boot("SecureBoot disabled") is False
    assert parse_secure_boot("EFI variables are not supported on this system") is False
    # the whole output: a later line qualifies the first (tests/unit/test_diagnosis.py: all shapes)
    assert (
        parse_secure_boot("SecureBoot enabled\nSecureBoot validation is disabled in shim") is False
    )


def test_dkms_status():
    entries = parse_dkms_status(
        "nvidia/580.178.04, 7.0.0-44-generic, x86_64: installed\n"
        "nvidia/580.178.04, 7.0.0-45-generic, x86_64: built\nnvidia/580.178.04: added\n"
    )
    assert [(e.kernel, e.state) for e in entries] == [
        ("7.0.0-44-generic", "installed"),
        ("7.0.0-45-generic", "built"),
        ("", "added"),
    ]
    assert parse_dkms_status("nvidia/580.95.05, 7.0.0-44-generic, x86_64:")[0].state == ""


def test_driver_state_capture_is_healthy():
    state = parse_driver_state(read("h200x2-rigup/driver-state.txt").splitlines())
    assert state["loaded"] == state["userspace"] == "580.159.04"
    assert state["secure_boot"] is None and state["nouveau_loaded"] is False
    assert state["secure_boot_state"] == "unknown"  # "sh: 1: mokutil: not found", no efi= line
    assert diagnose_driver(state, ["nvidia", "nvidia"]) == []


def test_driver_state_reads_every_line_of_a_key():
    state = parse_driver_state(
        [
            "kernel=7.0.0-44-generic",
            "secure_boot=SecureBoot enabled",
            "secure_boot=SecureBoot validation is disabled in shim",
            "module_kernel=7.0.0-40-generic 580.95.05",
            "module_kernel=7.0.0-44-generic 580.95.05",
            "gpu_driver=0000:01:00.0 nvidia",
            "gpu_driver=0000:02:00.0 -",
            "package=nvidia-driver-580-open",
            "klog=NVRM: Xid (PCI:0000:02:00): 79, pid=0, GPU has fallen off the bus.",
        ]
    )
    assert (
        state["secure_boot"] is False and state["secure_boot_state"] == "shim-validation-disabled"
    )
    assert state["module_kernels"] == {
        "7.0.0-40-generic": "580.95.05",
        "7.0.0-44-generic": "580.95.05",
    }
    assert state["gpu_drivers"] == ["nvidia", None]
    assert state["gpu_addresses"] == ["0000:01:00.0", "0000:02:00.0"]
    assert state["packages"] == ["nvidia-driver-580-open"] and len(state["kernel_log"]) == 1


def _state(**kw):
    base = {
        "kernel": "7.0.0-44-generic",
        "loaded": "580.178.04",
        "installed": "580.178.04",
        "userspace": "580.178.04",
        "nouveau_loaded": False,
        "dkms": [],
    }
    return {**base, **kw}


@pytest.mark.parametrize(
    "state,drivers,sig_id,words,reboot",
    [
        (
            _state(nouveau_loaded=True, loaded=None, installed=None, userspace=None),
            ["nouveau"],
            "driver-not-loaded/nouveau",
            "nouveau",
            True,
        ),
        (
            _state(loaded=None),
            ["nvidia"],
            "driver-not-loaded/installed-not-loaded",
            "installed for 7.0.0-44-generic but not loaded",
            True,
        ),
        (
            _state(loaded="580.159.03"),
            ["nvidia"],
            "driver-library-mismatch",
            "Driver/library",
            True,
        ),
        (
            _state(installed="580.190.01"),
            ["nvidia"],
            "module-updated",
            "on disk is 580.190.01",
            True,
        ),
        (
            _state(
                loaded=None,
                installed=None,
                dkms=parse_dkms_status("nvidia/580.178.04, 7.0.0-44-generic, x86_64: built"),
            ),
            [None],
            "driver-not-loaded/dkms-failed",
            "DKMS build of nvidia 580.178.04 failed for 7.0.0-44-generic (built)",
            False,
        ),
        (
            _state(loaded=None, installed=None),
            [None],
            "driver-not-loaded/not-installed-for-kernel",
            "no NVIDIA module is installed for the running kernel 7.0.0-44-generic",
            False,
        ),
    ],
)
def test_diagnosis(state, drivers, sig_id, words, reboot):
    verdicts = diagnose_driver(state, drivers)
    assert len(verdicts) == 1, verdicts
    assert verdicts[0].id == sig_id and words in str(verdicts[0])
    assert verdicts[0].reboot_fixes is reboot and "Fix:" in str(verdicts[0])


def test_fresh_box_is_not_installed():
    (v,) = diagnose_driver(_state(loaded=None, installed=None, userspace=None), [None, None])
    assert v.id == "driver-not-loaded/not-installed"
