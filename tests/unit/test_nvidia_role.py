"""roles/nvidia: facts' process() on captures, the kernel flavour, the preflight decisions, and
the on-target tools (files/nvidia/rigup-gpu-power, rigup-nvlink, rigup-nvidia-diagnose) run for
real against a recorded nvidia-smi and a recorded driver state."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rigup.nvidia import parse_driver_state
from roles.common.libraries import PACKAGE
from roles.nvidia.facts import (
    KernelPackages,
    NvidiaDriverState,
    NvidiaGpus,
    NvidiaInterconnect,
    NvidiaPackages,
    NvidiaPciGpus,
    SystemdUnits,
)
from roles.nvidia.kernel import kernel_flavour, uname_flavour
from roles.nvidia.layer import NvidiaLayer, driver_usable, hold_back_reason
from roles.nvidia.preflight import (
    driver_packages,
    driver_preflight,
    kernel_hold,
    masked_units,
    reboot_refusal,
)
from tests.captures import block

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
    capture = block("h200x2/query-gpu-compute-cap.txt")
    gpus = NvidiaGpus().process(["@exit 0", *capture.lines])
    assert gpus["error"] is None and gpus["verdicts"] == [] and gpus["exit_code"] == 0
    assert [(g.power_limit_w, g.compute_capability) for g in gpus["gpus"]] == [
        (700.0, "9.0"),
        (700.0, "9.0"),
    ]
    assert NvidiaGpus().process(["@absent"]) is None
    failed = NvidiaGpus().process(
        ["@exit 18", "Failed to initialize NVML: Driver/library version mismatch"]
    )
    assert failed["gpus"] == [] and failed["exit_code"] == 18
    assert failed["error"].startswith(
        "the loaded NVIDIA kernel module and the userspace libraries differ"
    )


def test_gpus_fact_never_raises():
    for output in (["@exit"], ["@exit x", "garbage"], ["@exit 15"], ["0, GPU-0"], [""]):
        fact = NvidiaGpus().process(output)
        assert fact["gpus"] == [] and isinstance(fact["verdicts"], list)


def test_gpus_fact_with_a_lost_gpu():
    capture = block("field/smi-gpu1-unreachable.txt")
    fact = NvidiaGpus().process([f"@exit {capture.exit_code}", *capture.lines])
    assert len(fact["gpus"]) == 1 and fact["exit_code"] == 15
    assert fact["error"].startswith("GPU 1 at 0000:02:00.0 unreachable")


def test_kernel_packages_fact():
    fact = KernelPackages().process(block("field/kernel-upgraded-not-rebooted.txt").lines)
    assert fact["kernel"] == "7.0.0-44-generic"
    assert "linux-image-7.0.0-40-generic" not in fact["packages"]  # rc: removed, config kept
    assert fact["packages"]["linux-image-generic-hwe-26.04"].startswith(
        "linux-image-7.0.0-45-generic"
    )


def test_systemd_units_fact():
    units = SystemdUnits().process(
        [
            "Id=nvidia-persistenced.service",
            "LoadState=masked",
            "UnitFileState=masked",
            "",
            "Id=rigup-gpu-power.service",
            "LoadState=loaded",
            "UnitFileState=enabled",
        ]
    )
    assert units["nvidia-persistenced.service"]["UnitFileState"] == "masked"
    assert units["rigup-gpu-power.service"] == {"LoadState": "loaded", "UnitFileState": "enabled"}


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
    "nvidia_gpu_compute_capability": "8.6",
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
INSTALLED = {
    "nvidia-driver-580-open": "580.178.04-0ubuntu0.26.04.1",
    "linux-modules-nvidia-580-open-generic": "7.0.0-44.44",
}


def kernel(fixture: str) -> dict:
    return KernelPackages().process(block(f"field/{fixture}").lines)


def _gpus(maxes=(350.0, 400.0), capability="8.6"):
    row = "{i}, GPU-{i}, 00000000:0{j}:00.0, NVIDIA GeForce RTX 3090, 580.178.04, Enabled, 290.00, 350.00, 100.00, {m:.2f}, 290.00, {cc}"
    text = "\n".join(row.format(i=i, j=i + 1, m=m, cc=capability) for i, m in enumerate(maxes))
    return NvidiaGpus().process(["@exit 0", *text.splitlines()])


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


def preflight(
    settings=None,
    pci=PCI,
    state=STATE,
    packages=None,
    smi="default",
    links="default",
    kernel_packages="default",
    units=None,
):
    data = {**SETTINGS, **(settings or {})}
    ubuntu = data["nvidia_install_path"] == "ubuntu"
    return driver_preflight(
        data,
        pci,
        state,
        packages or {"installed": INSTALLED if ubuntu else {}, "nvidia_repo_sources": []},
        _gpus() if smi == "default" else smi,
        _links() if links == "default" else links,
        kernel("kernel-server-generic.txt") if kernel_packages == "default" else kernel_packages,
        units,
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


def test_other_branch_is_switched_with_a_warning_naming_what_apt_removes():
    installed = {"nvidia-driver-595-open": "595.99.02", "libnvidia-compute-595": "595.99.02"}
    problems, warnings = preflight({"nvidia_driver_branch": 580}, packages={"installed": installed})
    assert problems == []
    assert warnings == [
        "switching the driver from nvidia-driver-595-open to nvidia-driver-580-open "
        "(nvidia_driver_branch 580, nvidia_driver_variant 'open'): apt removes 2 package(s) of "
        "the other driver (libnvidia-compute-595, nvidia-driver-595-open) in the transaction "
        "that installs it; the new driver loads at the next boot"
    ]


def test_closed_variant_switch_keeps_the_branch_shared_libraries():
    problems, warnings = preflight({"nvidia_driver_variant": "closed"})
    assert problems == []
    assert len(warnings) == 1 and "to nvidia-driver-580 (" in warnings[0], warnings
    assert "libnvidia-compute-580" not in warnings[0]  # shared by the open and closed modules


FRESH = {**STATE, "loaded": None, "installed": None, "userspace": None}


def fresh_preflight(settings, state):
    """A box with no NVIDIA driver yet, on the NVIDIA repository path unless ``settings`` say."""
    return preflight(
        {"nvidia_install_path": "nvidia-repo", **settings},
        pci=[{**g, "driver": None} for g in PCI],
        state=state,
        smi=None,
        links=None,
        kernel_packages=None,
    )


def test_secure_boot_only_blocks_the_unsigned_path():
    sb = {**STATE, "secure_boot": True, "secure_boot_state": "enforced"}
    assert preflight(state=sb) == ([], [])
    problems, _ = fresh_preflight({}, {**FRESH, "secure_boot": True})
    assert "Secure Boot is enabled" in problems[0] and "mokutil --import" in problems[0]
    # a driver that is loaded under Secure Boot is signed with an enrolled key: no refusal
    assert (
        preflight({"nvidia_install_path": "nvidia-repo"}, state=sb, kernel_packages=None)[0] == []
    )


def test_secure_boot_with_the_mok_enrolled_goes_ahead():
    """After the enrollment steps the refusal gives, the next converge proceeds (the key DKMS
    signs with is enrolled: `mokutil --test-key` says "is already enrolled")."""
    lines = [
        "secure_boot=SecureBoot enabled",
        "mok=/var/lib/shim-signed/mok/MOK.der is not enrolled",
    ]
    state = {**FRESH, **{k: v for k, v in parse_driver_state(lines).items() if k != "kernel"}}
    assert state["mok_enrolled"] is False
    assert "Secure Boot is enabled" in fresh_preflight({}, state)[0][0]
    problems, warnings = fresh_preflight({}, {**state, "mok_enrolled": True})
    assert problems == [] and "enrolled Machine Owner Key" in warnings[0]


@pytest.mark.parametrize(
    "fixture,refused",
    [
        ("field/sb-enabled.txt", True),
        ("field/sb-shim-validation-disabled.txt", False),
        ("field/sb-shim-validation-disabled-colour.txt", False),
        ("field/sb-setup-mode.txt", False),
        ("field/sb-disabled.txt", False),
        ("field/sb-no-efi.txt", False),
        ("field/sb-unsupported.txt", False),
    ],
)
def test_secure_boot_states_on_the_repository_path(fixture, refused):
    """Field report: "SecureBoot enabled" + "SecureBoot validation is disabled in shim" was read
    as enforced and the NVIDIA-repo path refused. The whole output decides."""
    state_lines = [f"secure_boot={line}" for line in block(fixture).lines]
    state = {**FRESH, **{k: v for k, v in parse_driver_state(state_lines).items() if "secure" in k}}
    problems, warnings = fresh_preflight({}, state)
    assert bool(problems) is refused, problems
    if fixture.endswith(("shim-validation-disabled.txt", "setup-mode.txt")):
        assert warnings[0].startswith("note: Secure Boot is") and "not enforced" in warnings[0]


def test_degraded_nvlink_required_vs_optional():
    degraded = _links("rtx3090/nvlink-s-one-link-inactive.txt")
    problems, _ = preflight(links=degraded)
    assert "NVLink is required" in problems[0] and "3 of 4 links" in problems[0]
    problems, warnings = preflight({"nvlink_required": False}, links=degraded)
    assert problems == [] and "P2P and custom all-reduce off" in warnings[0]


def test_unreadable_nvlink_required_vs_optional():
    broken = {"links": [], "topology": {}, "p2p": {}, "error": "nvidia-smi topo -m: no GPU matrix"}
    problems, _ = preflight(links=broken)
    assert "NVLink could not be read" in problems[0]
    problems, warnings = preflight({"nvlink_required": False}, links=broken)
    assert problems == [] and "runs over PCIe" in warnings[0]


def test_reboot_fixable_findings_are_warnings():
    problems, warnings = preflight(state={**STATE, "loaded": "580.159.03"})
    assert problems == [] and "Driver/library version mismatch" in warnings[0]
    assert warnings[0].endswith("(the run reboots the host for it)")


def test_fresh_box_without_driver_passes():
    fresh = {**STATE, "loaded": None, "installed": None, "userspace": None}
    assert preflight(
        pci=[{**g, "driver": None} for g in PCI],
        state=fresh,
        packages={"installed": {}, "nvidia_repo_sources": []},
        smi=None,
        links=None,
    ) == ([], [])


def test_reboot_refusal():
    assert reboot_refusal([], is_local=True, allowed=True) is None
    assert reboot_refusal(["x"], is_local=False, allowed=True) is None
    assert "controller itself (@local)" in reboot_refusal(["x"], is_local=True, allowed=True)
    assert "nvidia_reboot_allowed is False" in reboot_refusal(["x"], is_local=False, allowed=False)


# --- kernel flavours: the installed meta-package decides, never uname alone --------------------------


@pytest.mark.parametrize(
    "fixture,flavour,held",
    [
        (
            "kernel-desktop-hwe.txt",  # field report: Ubuntu Desktop's default
            "generic-hwe-26.04",
            (
                "linux-generic-hwe-26.04",
                "linux-image-generic-hwe-26.04",
                "linux-headers-generic-hwe-26.04",
            ),
        ),
        (
            "kernel-server-generic.txt",
            "generic",
            ("linux-generic", "linux-image-generic", "linux-headers-generic"),
        ),
        (
            "kernel-generic-and-hwe.txt",
            "generic-hwe-26.04",
            (
                "linux-generic-hwe-26.04",
                "linux-image-generic-hwe-26.04",
                "linux-headers-generic-hwe-26.04",
            ),
        ),
        (
            "kernel-lowlatency-hwe.txt",
            "lowlatency-hwe-26.04",
            (
                "linux-lowlatency-hwe-26.04",
                "linux-image-lowlatency-hwe-26.04",
                "linux-headers-lowlatency-hwe-26.04",
            ),
        ),
        (
            "kernel-generic-64k-hwe.txt",
            "generic-64k-hwe-26.04",
            (
                "linux-generic-64k-hwe-26.04",
                "linux-image-generic-64k-hwe-26.04",
                "linux-headers-generic-64k-hwe-26.04",
            ),
        ),
        (
            "kernel-oem.txt",
            "oem-26.04",
            ("linux-oem-26.04", "linux-image-oem-26.04", "linux-headers-oem-26.04"),
        ),
        (
            "kernel-upgraded-not-rebooted.txt",  # the meta-package already points at -45
            "generic-hwe-26.04",
            (
                "linux-generic-hwe-26.04",
                "linux-image-generic-hwe-26.04",
                "linux-headers-generic-hwe-26.04",
            ),
        ),
    ],
)
def test_kernel_flavour_from_the_installed_metapackage(fixture, flavour, held):
    facts = kernel(fixture)
    found = kernel_flavour(facts["kernel"], facts["packages"])
    assert found.name == flavour and found.metapackages == held
    assert driver_packages(SETTINGS, found) == [
        "nvidia-driver-580-open",
        f"linux-modules-nvidia-580-open-{flavour}",
    ]
    assert kernel_hold(SETTINGS, found) == held
    assert kernel_hold({**SETTINGS, "nvidia_install_path": "nvidia-repo"}, found) == ()


def test_hwe_desktop_plans_the_hwe_modules():
    """Field report: uname -r 7.0.0-44-generic with linux-generic-hwe-26.04 installed was given
    linux-modules-nvidia-580-open-generic and no kernel package held."""
    facts = kernel("kernel-desktop-hwe.txt")
    assert uname_flavour(facts["kernel"]) == "generic"  # what uname alone would have said
    found = kernel_flavour(facts["kernel"], facts["packages"])
    assert found.modules_package(580) == "linux-modules-nvidia-580-open-generic-hwe-26.04"


def test_virtual_points_at_generic_kernels_but_generic_wins():
    packages = {
        "linux-virtual": "linux-image-virtual",
        "linux-image-virtual": "linux-image-7.0.0-44-generic",
        "linux-generic": "linux-image-generic",
        "linux-image-generic": "linux-image-7.0.0-44-generic",
    }
    assert kernel_flavour("7.0.0-44-generic", packages).name == "generic"


def test_driver_packages_per_path():
    assert driver_packages({**SETTINGS, "nvidia_install_path": "nvidia-repo"}, None) == [
        "nvidia-open"
    ]
    assert uname_flavour("7.0.0-44-lowlatency") == "lowlatency"
    assert uname_flavour("7.0.0-44-generic-64k") == "generic-64k"
    assert uname_flavour("") is None
    # the H200 lending machine's kernel (tests/fixtures/h200x2/kernel.txt)
    assert uname_flavour(block("h200x2/kernel.txt").lines[0]) is None


def test_no_metapackage_for_the_running_kernel_is_refused():
    """Captured on the H200 machine: no kernel meta-package at all (tests/fixtures/h200x2)."""
    captured = {
        line.split()[1]: "" for line in block("h200x2/dpkg-linux.txt").lines if line[:2] == "ii"
    }
    assert kernel_flavour("6.8.0-85-generic", captured) is None
    problems, _ = preflight(kernel_packages={"kernel": "", "packages": captured})
    assert (
        "no installed kernel meta-package tracks the running kernel 7.0.0-44-generic"
        in (problems[0])
    )


def test_foreign_kernel_refused_on_the_ubuntu_path():
    """Found on real hardware: a dry plan on the H200 machine asked for
    linux-modules-nvidia-580-open-v657-gpu, a package that cannot exist."""
    problems, _ = preflight(state={**STATE, "kernel": "6.18.44-fc-v657-gpu"})
    assert "is not an Ubuntu kernel" in problems[0]
    assert preflight(
        {"nvidia_install_path": "nvidia-repo", "nvidia_cuda_keyring_sha256": "0" * 64},
        state={**STATE, "kernel": "6.18.44-fc-v657-gpu"},
        packages={"installed": {}, "nvidia_repo_sources": []},
    ) == ([], [])


# --- refusals of issue-shaped field reports ---------------------------------------------------------


def test_lost_gpu_is_one_clear_refusal():
    capture = block("field/smi-gpu1-unreachable.txt")
    smi = NvidiaGpus().process([f"@exit {capture.exit_code}", *capture.lines])
    problems, _ = preflight(smi=smi)
    assert len(problems) == 1, problems
    assert problems[0].startswith("GPU 1 at 0000:02:00.0 unreachable")
    assert "Xid 79" in problems[0] and "cold power cycle" in problems[0]


def test_masked_persistenced_is_refused_before_any_change():
    units = SystemdUnits().process(
        ["Id=nvidia-persistenced.service", "LoadState=masked", "UnitFileState=masked"]
    )
    problems, _ = preflight(units=units)
    assert problems == [
        "nvidia-persistenced.service is masked (UnitFileState=masked): rigup enables and starts "
        "it (it sets persistence mode at boot, and rigup-gpu-power wants it); run `systemctl "
        "unmask nvidia-persistenced`, then converge again"
    ]
    assert masked_units({"rigup-nvlink.service": {"UnitFileState": "masked-runtime"}})
    assert masked_units({"nvidia-persistenced.service": {"UnitFileState": "enabled"}}) == []


def test_compute_capability_checked_against_the_driver():
    problems, _ = preflight(smi=_gpus(capability="9.0"))
    assert problems == [
        "nvidia_gpu_compute_capability is 8.6 but nvidia-smi reports GPU 0 (NVIDIA GeForce RTX "
        "3090) 9.0, GPU 1 (NVIDIA GeForce RTX 3090) 9.0: set nvidia_gpu_compute_capability = "
        '"9.0" (it decides which KV cache dtypes the GPUs can run)'
    ]


@pytest.mark.parametrize(
    "fixture,path,message",
    [
        (
            "field/state-dkms-failed.txt",
            "nvidia-repo",
            "the NVIDIA kernel module is not loaded: the DKMS build of nvidia 580.95.05 failed",
        ),
        (
            "field/state-secure-boot-blocked.txt",
            "nvidia-repo",
            "Secure Boot is enabled and the nvidia-repo path builds unsigned modules",
        ),
    ],
)
def test_driver_not_loaded_refusals(fixture, path, message):
    state = parse_driver_state(block(fixture).lines)
    problems, _ = preflight(
        {"nvidia_install_path": path, "nvidia_cuda_keyring_sha256": "0" * 64},
        pci=[{**g, "driver": None} for g in PCI],
        state=state,
        packages={
            "installed": {"nvidia-open": "580.95.05-1", "cuda-keyring": "1.1-1"},
            "nvidia_repo_sources": ["/etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list"],
        },
        smi=NvidiaGpus().process(["@exit 9", *block("field/smi-no-driver.txt").lines]),
        links=None,
        kernel_packages=None,
    )
    assert any(message in p for p in problems), problems
    # nvidia-smi's "couldn't communicate" is not repeated: the state's diagnosis names the cause
    assert not any("could not communicate" in p for p in problems)


def test_layer_and_driver_usable():
    assert driver_usable(2, has_driver=True) and driver_usable(2, False, planned=True)
    assert not driver_usable(0, True) and not driver_usable(2, False)
    assert hold_back_reason(0, False) == "this host declares no NVIDIA GPUs (nvidia_gpu_count = 0)"
    layer = NvidiaLayer.of(
        {
            **SETTINGS,
            "rigup_prefix": "/opt/rigup",
            "rigup_etc_dir": "/etc/rigup",
            "rigup_state_dir": "/var/lib/rigup",
            "rigup_tmp_dir": "/var/tmp/rigup",
            "uv_cache_dir": "/var/cache/rigup/uv",
            "cuda_toolkit_version": "13.0.2",
            "model_store_dir": "/srv/rigup/models",
            "vllm_user": "vllm",
            "model_llm_manifest": "qwen3.6-27b-int4-autoround",
        },
        has_driver=False,
        planned=True,
    )
    assert layer.driver_usable and layer.driver_planned and layer.hold_back_reason is None
    assert layer.interconnect_env == "/run/rigup-nvlink/interconnect.env"
    assert layer.cuda_env["CUDA_HOME"] == "/opt/rigup/cuda-13.0/home"
    assert layer.compute_capability == "8.6"


# --- on-target tools, run for real; nvidia-smi replaced by a recorder of captured answers ----------

RECORDED_SMI = r"""#!/bin/sh
# Test double for nvidia-smi: replays captured answers (and exit statuses) and logs every call.
echo "$*" >> "$SMI_LOG"
answer() {
  f="$SMI_DIR/$1"; test -f "$f" || f="$SMI_DIR/$2"
  cat "$f"; if [ -f "$f.rc" ]; then exit "$(cat "$f.rc")"; fi; exit 0
}
case "$*" in
  --query-gpu=*) if [ -f "$SMI_DIR/after-set" ]; then answer query-after query; else answer query query; fi ;;
  "nvlink -s") answer nvlink nvlink ;;
  "topo -m") answer topo topo ;;
  "topo -p2p r") answer p2p p2p ;;
  -i*-pl*) touch "$SMI_DIR/after-set"; answer pl-answer pl-answer ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""


@pytest.fixture
def tools(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "bin").mkdir()
    shutil.copytree(PACKAGE, tmp_path / "lib" / "rigup", ignore=shutil.ignore_patterns("*.pyc"))
    for name in ("rigup-gpu-power", "rigup-nvlink", "rigup-nvidia-diagnose"):
        (tmp_path / "bin" / name).write_text((REPO / "files/nvidia" / name).read_text())
    smi = tmp_path / "nvidia-smi"
    smi.write_text(RECORDED_SMI)
    smi.chmod(0o755)
    return tmp_path


def _run(tools, script, *args, answers: dict, state: str | None = None, state_text: str = ""):
    """Run an on-target tool with nvidia-smi answering ``answers`` (``{"query": text}``; a
    ``(text, exit status)`` pair for a failing answer) and the driver state of ``state`` (a
    capture under tests/fixtures; none: an empty state)."""
    for key, value in answers.items():
        text, code = value if isinstance(value, tuple) else (value, None)
        (tools / key).write_text(text)
        if code is not None:
            (tools / f"{key}.rc").write_text(str(code))
    state_file = tools / "driver-state.txt"
    state_file.write_text(block(state).output if state else state_text)
    env = {
        **os.environ,
        "RIGUP_NVIDIA_SMI": str(tools / "nvidia-smi"),
        "RIGUP_DRIVER_STATE_COMMAND": f"cat {state_file}",
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
        f"{lim:.2f}, 350.00, 100.00, {mx:.2f}, {lim:.2f}, 8.6"
        for i, (lim, mx) in enumerate(zip(limits, maxes, strict=True))
    )


def _power_config(tools, watts, count=2):
    path = tools / "power.json"
    path.write_text(
        json.dumps({"gpu_count": count, "power_limit_w": watts, "persistence_mode": True})
    )
    return str(path)


def _capture(name: str) -> tuple[str, int | None]:
    b = block(name)
    return b.output, b.exit_code


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


def test_power_without_power_management_does_not_crash(tools):
    na = _query((290, 290)).replace("290.00, 350.00, 100.00", "[N/A], [N/A], [N/A]")
    proc, _ = _run(
        tools,
        "rigup-gpu-power",
        "check",
        "--config",
        _power_config(tools, 290),
        answers={"query": na},
    )
    assert proc.returncode == 2 and "reports no power limit range (N/A)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_power_lost_gpu_exits_2_with_the_lost_gpu(tools):
    """Field report: GPU 0's row and GPU 1's "Unable to determine the device handle", exit 15.
    The unit names GPU 1, its bus, Xid 79 and the remedies; no reboot hint, no traceback."""
    proc, calls = _run(
        tools,
        "rigup-gpu-power",
        "apply",
        "--config",
        _power_config(tools, 290),
        answers={"query": _capture("field/smi-gpu1-unreachable.txt")},
    )
    assert proc.returncode == 2, proc.stderr
    assert "rigup-gpu-power: GPU 1 at 0000:02:00.0 unreachable" in proc.stderr
    assert "Xid 79" in proc.stderr and "cold power cycle" in proc.stderr
    assert "version mismatch" not in proc.stderr and "Traceback" not in proc.stderr
    assert not [c for c in calls if "-pl" in c]


@pytest.mark.parametrize("script", ["rigup-gpu-power", "rigup-nvlink"])
def test_driver_not_loaded_is_one_diagnosis_in_both_units(tools, script):
    """Field report: exit 9 "couldn't communicate with the NVIDIA driver". Each unit says the
    module is not loaded and why (here: Secure Boot rejects the unsigned DKMS module), once,
    without an unrelated version-mismatch hint."""
    config = _power_config(tools, 290)
    args = ["apply", "--config", config] if script == "rigup-gpu-power" else []
    if script == "rigup-nvlink":
        cfg = tools / "nvlink.json"
        cfg.write_text(json.dumps({"gpu_count": 2, "expected_links": 4, "required": False}))
        args = ["--config", str(cfg), "--env-out", str(tools / "run" / "interconnect.env")]
    proc, _ = _run(
        tools,
        script,
        *args,
        answers={"query": _capture("field/smi-no-driver.txt")},
        state="field/state-secure-boot-blocked.txt",
    )
    assert proc.returncode == 2, proc.stderr
    problems = [line for line in proc.stderr.splitlines() if "not loaded" in line]
    assert len(problems) == 1, proc.stderr
    assert problems[0].startswith(f"{script}: the NVIDIA kernel module is not loaded: Secure Boot")
    assert "version mismatch" not in proc.stderr and "couldn't communicate" not in proc.stderr
    assert not (tools / "run" / "interconnect.env").exists()


def _nvlink(tools, fixture, required=True, count=2, answers=None, query=None):
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
            "query": query or _query((290, 290)),
            "nvlink": (FIX / fixture).read_text(),
            "topo": (FIX / "rtx3090/topo-m-nv4.txt").read_text(),
            "p2p": (FIX / "rtx3090/topo-p2p-r-ok.txt").read_text(),
            **(answers or {}),
        },
    )
    return proc, env_out


PCIE_ENV = ["NCCL_P2P_DISABLE=1", "RIGUP_VLLM_INTERCONNECT_ARGS=--disable-custom-all-reduce"]


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
    assert env.read_text().splitlines()[1:] == PCIE_ENV


def test_nvlink_optional_without_any_active_link_runs_over_pcie(tools):
    """Field report: nvlink_required = False, a GPU with no active link: PCIe env, exit 0."""
    no_links = "GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-0)\nGPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-1)\n"
    proc, env = _nvlink(
        tools, "rtx3090/nvlink-s-healthy.txt", required=False, answers={"nvlink": no_links}
    )
    assert proc.returncode == 0, proc.stderr
    assert env.read_text().splitlines()[1:] == PCIE_ENV
    assert "no active NVLink" in proc.stderr and "runs over PCIe" in proc.stderr


@pytest.mark.parametrize("required,code", [(False, 0), (True, 1)])
def test_nvlink_query_failing_is_not_verified(tools, required, code):
    """Field report: `nvidia-smi nvlink -s` exits non-zero. Optional: PCIe env and exit 0 (vLLM
    starts over PCIe); required: exit 1 (vLLM stays down). Never a traceback."""
    nvlink_failed = (block("h200x2/query-errors.txt").output, 255)
    proc, env = _nvlink(
        tools, "rtx3090/nvlink-s-healthy.txt", required=required, answers={"nvlink": nvlink_failed}
    )
    assert proc.returncode == code, proc.stderr
    assert "`nvidia-smi nvlink -s` failed" in proc.stderr and "Traceback" not in proc.stderr
    assert (env.read_text().splitlines()[1:] == PCIE_ENV) if not required else not env.exists()


def test_nvlink_topology_unreadable_optional_runs_over_pcie(tools):
    proc, env = _nvlink(
        tools, "rtx3090/nvlink-s-healthy.txt", required=False, answers={"topo": "garbage\n"}
    )
    assert proc.returncode == 0 and env.read_text().splitlines()[1:] == PCIE_ENV
    assert "no GPU matrix" in proc.stderr


def test_nvlink_lost_gpu_exits_2(tools):
    proc, env = _nvlink(
        tools,
        "rtx3090/nvlink-s-healthy.txt",
        required=False,
        query=_capture("field/smi-gpu1-unreachable.txt"),
    )
    assert proc.returncode == 2 and "GPU 1 at 0000:02:00.0 unreachable" in proc.stderr
    assert not env.exists()


def test_nvlink_single_gpu_has_nothing_to_verify(tools):
    proc, env = _nvlink(tools, "rtx3090/nvlink-s-healthy.txt", count=1)
    assert proc.returncode == 0 and env.read_text().splitlines()[1:] == [
        "RIGUP_VLLM_INTERCONNECT_ARGS="
    ]


@pytest.mark.parametrize(
    "state,query,code,words",
    [
        (
            "field/state-secure-boot-blocked.txt",
            _capture("field/smi-no-driver.txt"),
            2,
            ["FAIL: the NVIDIA kernel module is not loaded: Secure Boot is enforced"],
        ),
        (
            "field/state-dkms-failed.txt",
            _capture("field/smi-no-driver.txt"),
            2,
            [
                "the DKMS build of nvidia 580.95.05 failed",
                "/var/lib/dkms/nvidia/580.95.05/build/make.log",
            ],
        ),
        (
            "field/state-not-installed-for-kernel.txt",
            _capture("field/smi-no-driver.txt"),
            2,
            ["no NVIDIA module is installed for the running kernel 7.0.0-45-generic"],
        ),
        (
            "field/state-installed-not-loaded.txt",
            _capture("field/smi-no-driver.txt"),
            2,
            ["installed for 7.0.0-44-generic but not loaded"],
        ),
    ],
)
def test_diagnose_names_the_cause_and_exits_non_zero(tools, state, query, code, words):
    proc, _ = _run(tools, "rigup-nvidia-diagnose", answers={"query": query}, state=state)
    assert proc.returncode == code, proc.stdout + proc.stderr
    for word in words:
        assert word in proc.stdout, proc.stdout
    assert proc.stdout.count("not loaded:") == 1 and "Traceback" not in proc.stderr


def test_diagnose_json_and_healthy(tools):
    healthy = "\n".join(
        [
            "kernel=7.0.0-44-generic",
            "loaded=580.178.04",
            "installed=580.178.04",
            "userspace=580.178.04",
            "nvidia_smi=/usr/bin/nvidia-smi",
            "secure_boot=SecureBoot enabled",
        ]
    )
    proc, _ = _run(
        tools,
        "rigup-nvidia-diagnose",
        "--json",
        answers={"query": _query((290, 290))},
        state_text=healthy,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["status"] == "ok" and report["verdicts"] == []
    assert report["secure_boot"] == "enforced"


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


def test_facts_never_raise_on_garbage():
    """A deterministic fuzz of every NVIDIA fact's process() with fragments of real lines: a host
    that answers strangely gets a diagnosis or an empty fact, never a traceback."""
    import random

    rng = random.Random(20261201)
    pieces = [
        *("kernel=", "loaded=", "dkms=nvidia/1:", "dkms=", "module_kernel=", "gpu_driver="),
        *("secure_boot=", "sb_var=zz", "efi=1", "mok=", "@exit", "@nvlink", "@topo", "@p2p"),
        *("GPU 0: x (UUID: y)", "Link 0: <inactive>", "GPU0\tGPU1", "X", "NV4", "|", "ii |a|b"),
        *("Id=x", "=", "pkg ii", "source", "hold"),
    ]
    facts = (NvidiaDriverState, NvidiaGpus, NvidiaInterconnect, NvidiaPciGpus, NvidiaPackages)
    for fact in (*facts, KernelPackages, SystemdUnits):
        for _ in range(500):
            output = [
                "".join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))
                for _ in range(rng.randint(0, 8))
            ]
            fact().process(output)


def test_diagnose_names_a_gpu_that_needs_a_reset_by_its_index(tools):
    """The GSP firmware's timeout and Xid 154 (open-gpu-kernel-modules#1134) on the second card
    of rigup's query (bus 00000000:02:00.0): named GPU 1, and the reset said."""
    state = "\n".join(
        [
            "kernel=7.0.3-generic",
            "loaded=580.178.04",
            "installed=580.178.04",
            "userspace=580.178.04",
            "nvidia_smi=/usr/bin/nvidia-smi",
            "secure_boot=SecureBoot disabled",
            "klog=Jun 02 19:40:29 rig kernel: NVRM: Back to back GSP RPC timeout detected! GPU "
            "marked for reset",
            "klog=Jun 02 19:40:29 rig kernel: NVRM: Xid (PCI:0000:02:00): 154, GPU recovery "
            "action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        ]
    )
    proc, _ = _run(
        tools, "rigup-nvidia-diagnose", answers={"query": _query((290, 290))}, state_text=state
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "GPU 1 (NVIDIA GeForce RTX 3090) at 0000:02:00 needs a GPU reset" in proc.stdout
    assert "the GSP firmware of GPU 1 (NVIDIA GeForce RTX 3090)" in proc.stdout
