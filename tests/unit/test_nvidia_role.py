"""roles/nvidia: facts' process() on captures, the preflight decisions, and the on-target tools
(files/nvidia/rigup-gpu-power, rigup-nvlink) run for real against a recorded nvidia-smi."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roles.nvidia import (
    driver_packages,
    driver_preflight,
    kernel_flavour,
    reboot_refusal,
)
from roles.nvidia.facts import (
    NvidiaDriverState,
    NvidiaGpus,
    NvidiaInterconnect,
    NvidiaPackages,
    NvidiaPciGpus,
)

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"


def lines(name: str) -> list[str]:
    return (FIX / name).read_text().splitlines()


# --- facts on the captures made with the facts' own commands (h200x2-rigup) -----------------------


def test_pci_fact():
    assert NvidiaPciGpus().process(lines("h200x2-rigup/pci-gpus.txt")) == [
        {"address": "0000:00:06.0", "device": "0x2335", "class": "0x030200", "driver": "nvidia"},
        {"address": "0000:00:07.0", "device": "0x2335", "class": "0x030200", "driver": "nvidia"},
    ]
    assert NvidiaPciGpus().process(["0000:01:00.0 0x2204 0x030000 -"])[0]["driver"] is None


def test_driver_state_fact():
    state = NvidiaDriverState().process(lines("h200x2-rigup/driver-state.txt"))
    assert state["kernel"] == "6.18.44-fc-v657-gpu" and state["loaded"] == "580.159.04"
    assert state["installed"] is None and state["nvidia_smi"] == "/usr/local/nvidia/bin/nvidia-smi"


def test_packages_fact_ignores_not_installed():
    facts = NvidiaPackages().process(lines("h200x2-rigup/packages.txt"))
    assert facts["installed"] == {} and "libnccl2" in facts["held"]
    both = NvidiaPackages().process(
        [
            "pkg ii  nvidia-driver-580-open 580.178.04-0ubuntu0.26.04.1",
            "pkg rc  nvidia-driver-570-open 570.1-1",
            "source /etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list",
            "hold nvidia-driver-580-open",
        ]
    )
    assert list(both["installed"]) == ["nvidia-driver-580-open"]
    assert both["nvidia_repo_sources"] == ["/etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list"]


def test_gpus_fact():
    gpus = NvidiaGpus().process(lines("h200x2-rigup/query-gpu.txt"))
    assert gpus["error"] is None and [g.power_limit_w for g in gpus["gpus"]] == [700.0, 700.0]
    assert NvidiaGpus().process(["@absent"]) is None
    failed = NvidiaGpus().process(
        ["@failed", "Failed to initialize NVML: Driver/library version mismatch"]
    )
    assert failed == {
        "gpus": [],
        "error": "Failed to initialize NVML: Driver/library version mismatch",
    }


def test_interconnect_fact():
    fact = NvidiaInterconnect().process(lines("h200x2-rigup/interconnect.txt"))
    assert fact["error"] is None
    assert [g.active for g in fact["links"]] == [18, 18]
    assert fact["topology"][(0, 1)] == "NV18" and fact["p2p"][(1, 0)] == "OK"
    assert NvidiaInterconnect().process(["@absent"]) is None


# --- preflight (pure): every refusal happens before any change --------------------------------------

SETTINGS = {
    "nvidia_gpu_count": 2,
    "nvidia_driver_branch": 580,
    "nvidia_install_path": "ubuntu",
    "nvidia_power_limit_w": 290,
    "nvlink_expected_links": 4,
    "nvlink_required": True,
}
PCI = [{"address": f"0000:0{i}:00.0", "driver": "nvidia"} for i in (1, 2)]
STATE = {
    "kernel": "7.0.0-44-generic",
    "loaded": "580.178.04",
    "installed": "580.178.04",
    "userspace": "580.178.04",
    "nouveau_loaded": False,
    "secure_boot": False,
    "dkms": [],
}


def _gpus(maxes=(350.0, 400.0)):
    row = "{i}, GPU-{i}, 00000000:0{j}:00.0, NVIDIA GeForce RTX 3090, 580.178.04, Enabled, 290.00, 350.00, 100.00, {m:.2f}, 290.00"
    text = "\n".join(row.format(i=i, j=i + 1, m=m) for i, m in enumerate(maxes))
    return NvidiaGpus().process(text.splitlines())


def _links(fixture="rtx3090/nvlink-s-healthy.txt"):
    return NvidiaInterconnect().process(
        [
            "@nvlink",
            *lines(fixture),
            "@topo",
            *lines("rtx3090/topo-m-nv4.txt"),
            "@p2p",
            *lines("rtx3090/topo-p2p-r-ok.txt"),
        ]
    )


def preflight(settings=None, pci=PCI, state=STATE, packages=None, smi="default", links="default"):
    return driver_preflight(
        {**SETTINGS, **(settings or {})},
        pci,
        state,
        packages or {"installed": {}, "nvidia_repo_sources": [], "held": []},
        _gpus() if smi == "default" else smi,
        _links() if links == "default" else links,
    )


def test_converged_rig_passes():
    assert preflight() == ([], [])


def test_one_gpu_missing_from_the_pci_bus():
    problems, _ = preflight(pci=PCI[:1])
    assert (
        "1 NVIDIA GPU(s) on the PCI bus (0000:01:00.0) but the inventory declares 2" in problems[0]
    )


def test_power_limit_outside_one_cards_range():
    problems, _ = preflight({"nvidia_power_limit_w": 380})
    assert len(problems) == 1 and "GPU 0" in problems[0] and "100-350 W" in problems[0]


def test_both_install_paths_refused():
    packages = {
        "installed": {
            "linux-modules-nvidia-580-open-generic": "7.0.0-44.44",
            "cuda-keyring": "1.1-1",
        },
        "nvidia_repo_sources": ["/etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list"],
    }
    problems, _ = preflight(packages=packages)
    assert "both driver install paths are on this host" in problems[0]


def test_path_mismatch_refused():
    problems, _ = preflight(
        packages={"installed": {}, "nvidia_repo_sources": ["/etc/apt/sources.list.d/cuda.list"]}
    )
    assert "set nvidia_install_path = 'nvidia-repo'" in problems[0]


def test_other_branch_refused():
    problems, _ = preflight(packages={"installed": {"nvidia-driver-570-open": "570.1"}})
    assert "another driver branch is installed (nvidia-driver-570-open)" in problems[0]


def test_secure_boot_only_blocks_the_unsigned_path():
    sb = {**STATE, "secure_boot": True}
    assert preflight(state=sb) == ([], [])
    problems, _ = preflight({"nvidia_install_path": "nvidia-repo"}, state=sb)
    assert "Secure Boot is enabled" in problems[0] and "mokutil --import" in problems[0]


def test_degraded_nvlink_required_vs_optional():
    degraded = _links("rtx3090/nvlink-s-one-link-inactive.txt")
    problems, _ = preflight(links=degraded)
    assert "NVLink is required" in problems[0] and "3 of 4 links" in problems[0]
    problems, warnings = preflight({"nvlink_required": False}, links=degraded)
    assert problems == [] and "P2P and custom all-reduce off" in warnings[0]


def test_reboot_fixable_findings_are_warnings():
    problems, warnings = preflight(state={**STATE, "loaded": "580.159.03"})
    assert problems == [] and "version mismatch" in warnings[0]


def test_fresh_box_without_driver_passes():
    fresh = {**STATE, "loaded": None, "installed": None, "userspace": None}
    assert preflight(
        pci=[{**g, "driver": None} for g in PCI], state=fresh, smi=None, links=None
    ) == ([], [])


def test_reboot_refusal():
    assert reboot_refusal([], is_local=True, allowed=True) is None
    assert reboot_refusal(["x"], is_local=False, allowed=True) is None
    assert "controller itself (@local)" in reboot_refusal(["x"], is_local=True, allowed=True)
    assert "nvidia_reboot_allowed is False" in reboot_refusal(["x"], is_local=False, allowed=False)


def test_driver_packages_per_path():
    assert driver_packages(SETTINGS, "7.0.0-44-generic") == [
        "nvidia-driver-580-open",
        "linux-modules-nvidia-580-open-generic",
    ]
    assert driver_packages({**SETTINGS, "nvidia_install_path": "nvidia-repo"}, "") == [
        "nvidia-open"
    ]
    assert kernel_flavour("7.0.0-44-lowlatency") == "lowlatency"
    assert kernel_flavour("") is None
    # the H200 lending machine's kernel (tests/fixtures/h200x2-rigup/driver-state.txt)
    assert kernel_flavour("6.18.44-fc-v657-gpu") is None


def test_foreign_kernel_refused_on_the_ubuntu_path():
    """Found on real hardware: a dry plan on the H200 machine asked for
    linux-modules-nvidia-580-open-v657-gpu, a package that cannot exist."""
    problems, _ = preflight(state={**STATE, "kernel": "6.18.44-fc-v657-gpu"})
    assert "is not an Ubuntu kernel" in problems[0]
    assert preflight(
        {"nvidia_install_path": "nvidia-repo", "nvidia_cuda_keyring_sha256": "0" * 64},
        state={**STATE, "kernel": "6.18.44-fc-v657-gpu"},
    ) == ([], [])


# --- on-target tools, run for real; nvidia-smi replaced by a recorder of captured answers ----------

RECORDED_SMI = r"""#!/bin/sh
# Test double for nvidia-smi: replays captured answers and logs every call (no GPU here).
echo "$*" >> "$SMI_LOG"
case "$*" in
  --query-gpu=*) if [ -f "$SMI_DIR/after-set" ]; then cat "$SMI_DIR/query-after"; else cat "$SMI_DIR/query"; fi ;;
  "nvlink -s") cat "$SMI_DIR/nvlink" ;;
  "topo -m") cat "$SMI_DIR/topo" ;;
  "topo -p2p r") cat "$SMI_DIR/p2p" ;;
  -i*-pl*) cat "$SMI_DIR/pl-answer"; touch "$SMI_DIR/after-set" ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""


@pytest.fixture
def tools(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib" / "rigup_nvidia.py").write_text(
        (REPO / "roles/nvidia/parsers.py").read_text()
    )
    for name in ("rigup-gpu-power", "rigup-nvlink"):
        (tmp_path / "bin" / name).write_text((REPO / "files/nvidia" / name).read_text())
    smi = tmp_path / "nvidia-smi"
    smi.write_text(RECORDED_SMI)
    smi.chmod(0o755)
    return tmp_path


def _run(tools, script, *args, answers: dict):
    for key, value in answers.items():
        (tools / key).write_text(value)
    env = {
        **os.environ,
        "RIGUP_NVIDIA_SMI": str(tools / "nvidia-smi"),
        "SMI_DIR": str(tools),
        "SMI_LOG": str(tools / "calls.log"),
    }
    proc = subprocess.run(
        [sys.executable, str(tools / "bin" / script), *args],
        env=env,
        capture_output=True,
        text=True,
    )
    calls = (tools / "calls.log").read_text().splitlines() if (tools / "calls.log").exists() else []
    return proc, calls


def _query(limits, maxes=(350, 400), persistence="Enabled"):
    return "\n".join(
        f"{i}, GPU-{i}, 00000000:0{i + 1}:00.0, NVIDIA GeForce RTX 3090, 580.178.04, {persistence}, "
        f"{lim:.2f}, 350.00, 100.00, {mx:.2f}, {lim:.2f}"
        for i, (lim, mx) in enumerate(zip(limits, maxes, strict=True))
    )


def _power_config(tools, watts, count=2):
    path = tools / "power.json"
    path.write_text(
        json.dumps({"gpu_count": count, "power_limit_w": watts, "persistence_mode": True})
    )
    return str(path)


def test_power_applies_by_uuid_and_verifies(tools):
    proc, calls = _run(
        tools,
        "rigup-gpu-power",
        "apply",
        "--config",
        _power_config(tools, 290),
        answers={
            "query": _query((350, 290)),
            "query-after": _query((290, 290)),
            "pl-answer": (FIX / "rtx3090/pl-success.txt").read_text(),
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert [c for c in calls if "-pl" in c] == ["-i GPU-0 -pl 290"]  # GPU 1 already at 290 W
    assert "GPU 1 GPU-1: power limit already 290 W" in proc.stdout


def test_power_out_of_range_writes_nothing(tools):
    proc, calls = _run(
        tools,
        "rigup-gpu-power",
        "apply",
        "--config",
        _power_config(tools, 380),
        answers={"query": _query((350, 350))},
    )
    assert (
        proc.returncode == 2 and "nothing was changed" in proc.stderr and "100-350 W" in proc.stderr
    )
    assert not [c for c in calls if "-pl" in c]


def test_power_refusal_after_all_done_fails(tools):
    proc, _ = _run(
        tools,
        "rigup-gpu-power",
        "apply",
        "--config",
        _power_config(tools, 290),
        answers={
            "query": _query((350, 350)),
            "query-after": _query((350, 350)),
            "pl-answer": (FIX / "rtx3090/pl-insufficient-permissions.txt").read_text()
            + "All done.\n",
        },
    )
    assert proc.returncode == 1
    assert (
        "insufficient-permissions" in proc.stderr and "reads 350.0 W, expected 290 W" in proc.stderr
    )


def test_power_wrong_gpu_count_refused(tools):
    proc, calls = _run(
        tools,
        "rigup-gpu-power",
        "apply",
        "--config",
        _power_config(tools, 290, count=3),
        answers={"query": _query((350, 350))},
    )
    assert proc.returncode == 2 and "2 GPU(s) found, 3 expected" in proc.stderr
    assert not [c for c in calls if "-pl" in c]


def test_power_check_reports_persistence(tools):
    proc, _ = _run(
        tools,
        "rigup-gpu-power",
        "check",
        "--config",
        _power_config(tools, 290),
        answers={"query": _query((290, 290), persistence="Disabled")},
    )
    assert proc.returncode == 1 and "persistence mode Disabled, expected Enabled" in proc.stderr


def _nvlink(tools, fixture, required=True, count=2):
    cfg = tools / "nvlink.json"
    cfg.write_text(json.dumps({"gpu_count": count, "expected_links": 4, "required": required}))
    env_out = tools / "run" / "interconnect.env"
    proc, _ = _run(
        tools,
        "rigup-nvlink",
        "--config",
        str(cfg),
        "--env-out",
        str(env_out),
        answers={
            "nvlink": (FIX / fixture).read_text(),
            "topo": (FIX / "rtx3090/topo-m-nv4.txt").read_text(),
            "p2p": (FIX / "rtx3090/topo-p2p-r-ok.txt").read_text(),
        },
    )
    return proc, env_out


def test_nvlink_verified_writes_nvl_env(tools):
    proc, env = _nvlink(tools, "rtx3090/nvlink-s-healthy.txt")
    assert proc.returncode == 0, proc.stderr
    assert env.read_text().splitlines()[1:] == [
        "NCCL_P2P_LEVEL=NVL",
        "RIGUP_VLLM_INTERCONNECT_ARGS=",
    ]


def test_nvlink_degraded_required_keeps_vllm_down(tools):
    proc, env = _nvlink(tools, "rtx3090/nvlink-s-one-link-inactive.txt")
    assert proc.returncode == 1 and "NVLink degraded, 3 of 4" in proc.stderr
    assert not env.exists()


def test_nvlink_degraded_optional_turns_p2p_off(tools):
    proc, env = _nvlink(tools, "rtx3090/nvlink-s-one-link-inactive.txt", required=False)
    assert proc.returncode == 0
    assert env.read_text().splitlines()[1:] == [
        "NCCL_P2P_DISABLE=1",
        "RIGUP_VLLM_INTERCONNECT_ARGS=--disable-custom-all-reduce",
    ]


def test_nvlink_single_gpu_has_nothing_to_verify(tools):
    proc, env = _nvlink(tools, "rtx3090/nvlink-s-healthy.txt", count=1)
    assert proc.returncode == 0 and env.read_text().splitlines()[1:] == [
        "RIGUP_VLLM_INTERCONNECT_ARGS="
    ]


def test_cuda_toolkit_home_fact():
    from roles.nvidia.facts import CudaToolkitHome

    top = "/opt/rigup/cuda-13.0/venv/lib/python3.13/site-packages/nvidia/cu13"
    assert CudaToolkitHome().process([f"top={top}", "lib64=1", f"link={top}"]) == {
        "top": top,
        "lib64": True,
        "link": top,
    }
    assert CudaToolkitHome().process(["top=", "lib64=0", "link="]) == {
        "top": None,
        "lib64": False,
        "link": None,
    }
