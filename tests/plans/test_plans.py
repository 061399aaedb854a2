"""Plans of the main deploy on @fake hosts: what a run would do, and what it refuses, without a
machine. Runs the real CLI: `pyinfra <inventory> deploys/full.py --dry --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"


def run_pyinfra(scenario: str, *args: str) -> subprocess.CompletedProcess:
    """The pyinfra CLI on the @fake host of ``scenario``, with the shipped settings."""
    return subprocess.run(
        [
            str(PYINFRA),
            *args[:1],
            "tests/plans/inventory.py",
            *args[1:],
            "--group-data",
            "inventory/group_data",
        ],
        cwd=REPO,
        env={**os.environ, "RIGUP_PLAN_SCENARIO": scenario, "PYINFRA_FAKE_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=180,
    )


def plan(scenario: str, deploy: str = "deploys/full.py") -> tuple[int, dict | None, str]:
    """Run a dry plan for a scenario: (exit code, parsed JSON or None, stderr)."""
    proc = run_pyinfra(scenario, "--dry", deploy, "--json")
    parsed = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, parsed, proc.stderr


def changes(parsed: dict) -> list[str]:
    return [op["name"] for op in parsed["plan"] if op["hosts_with_change"]]


def conditional(parsed: dict) -> list[str]:
    return [op["name"] for op in parsed["plan"] if op["hosts_with_conditional_change"]]


def test_fresh_rig_plans_every_component_in_order(fresh_rig):
    names = changes(fresh_rig)
    order = [
        "rigup base | Install the apt baseline",
        "rigup base | Install uv 0.13.9 (found: none)",
        "rigup base | Script rigup-explain (why a unit is not up)",
        "rigup base | /usr/local/bin/rigup-explain on PATH",
        "NVIDIA layer | NVIDIA driver | Blacklist nouveau",
        "NVIDIA layer | NVIDIA driver | Driver nvidia-driver-580-open + linux-modules-nvidia-580-open-generic",
        "NVIDIA layer | CUDA toolkit | CUDA toolkit venv (cuda-toolkit 13.0.2 wheels; uv, locked)",
        "NVIDIA layer | GPU power and persistence | rigup-gpu-power.service enabled and applied",
        "NVIDIA layer | NVLink | rigup-nvlink.service enabled and verified",
        "Model tool | Model tool venv (huggingface_hub, hf_xet, modelscope; uv, locked)",
        "LLM checkpoint | Place model qwen3.6-27b-int4-autoround@mirror-2026-11",
        "LLM checkpoint | Text-only edit of config.json (language_model_only)",
        "vLLM | Service user vllm",
        "vLLM | vLLM venv (vllm 0.22.1 and its dependencies; uv, locked)",
        "vLLM | Check the serve arguments with vLLM's own parser and the placed model",
        "vLLM | Check the checkpoint is served text-only (language_model_only) with vLLM's config code",
        "vLLM | Unit vllm.service",
        "vLLM | vllm.service enabled in rigup-llm.target (runs in the llm mode)",
        "ComfyUI | ComfyUI source at release v0.45.2 (first run: its commit resolved on the host)",
        "ComfyUI | ComfyUI v0.45.2 requirements locked (uv pip compile --generate-hashes)",
        "ComfyUI | ComfyUI venv (ComfyUI v0.45.2 requirements; uv, locked on this run)",
        "ComfyUI | Check the main.py arguments with the pinned ComfyUI's own parser",
        "ComfyUI | Unit comfyui.service",
        "ComfyUI | comfyui.service enabled in rigup-media.target (runs in the media mode)",
        "GPU modes | Unit rigup-llm.target",
        "GPU modes | Unit rigup-media.target",
        "GPU modes | Switch command rigup-mode",
        "GPU modes | rigup-llm.target is the boot mode",
        "GPU modes | A mode is running (llm when none is)",
        "Doctor | Command rigup-doctor",
        "Doctor | Command rigup-bench",
        "Doctor | Command rigup-report",
        "Doctor | doctor.json (what the doctor, the benchmark and the report know of this host)",
        "Doctor | Bench arm nvlink-off.conf",
        "Doctor | Bench arm mtp-1.conf",
        "Doctor | Check the bench arms' serve arguments with vLLM's own parser",
    ]
    assert [n for n in names if n in order] == order


def test_fresh_rig_reloads_only_on_change(fresh_rig):
    assert "vLLM | systemd daemon-reload" in conditional(fresh_rig)
    assert "ComfyUI | systemd daemon-reload" in conditional(fresh_rig)


def test_fresh_rig_reboots_only_if_the_install_changes_something(fresh_rig):
    assert "NVIDIA layer | NVIDIA driver | Reboot to load the NVIDIA driver" in conditional(
        fresh_rig
    )
    assert (
        "NVIDIA layer | NVIDIA driver | Regenerate the initramfs (nouveau blacklist changed)"
        in (conditional(fresh_rig))
    )


@pytest.mark.parametrize(
    "scenario,deploy,why",
    [
        ("fresh_no_gpu", "deploys/full.py", "declares no NVIDIA GPUs"),
        ("vllm_alone_no_driver", "deploys/vllm.py", "has no NVIDIA driver"),
    ],
)
def test_host_without_gpus_or_driver_installs_but_does_not_start(scenario, deploy, why):
    rc, parsed, err = plan(scenario, deploy)
    assert rc == 0, err
    names = changes(parsed) + conditional(parsed)
    assert "vLLM | vllm.service installed, not started (no GPUs or no driver)" in [
        op["name"] for op in parsed["plan"]
    ]
    assert not any("enabled in rigup-llm.target" in n or "Restart" in n for n in names)
    assert why in err and "not started" in err


@pytest.mark.parametrize(
    "scenario,message",
    [
        ("bad_kv_cache_dtype", "vllm_kv_cache_dtype: must be one of"),
        ("too_few_gpus", "vllm_tensor_parallel_size: 2 is more than the 1 GPU(s)"),
        (
            "missing_model_source",
            "model qwen3.6-27b-int4-autoround@mirror-2026-11: no copy found under /srv/mirror",
        ),
        ("disk_too_small", "18.49 GB to place + 1 GiB spare, but only 10.00 GB free"),
        (
            "modelscope_only_unpinned",
            "has no lock (no commit, no sha256), and modelscope checks every file against a lock",
        ),
        ("not_a_checkpoint", "has no config.json"),
        ("no_systemd", "systemd is not running as PID 1"),
        ("not_root", "not root: connect as root or add --sudo"),
        (
            "secure_boot_nvidia_repo",
            "Secure Boot is enabled and the nvidia-repo path builds unsigned",
        ),
        ("power_limit_out_of_range", "450 W is outside its range 100-350 W"),
        (
            "one_gpu_missing",
            "1 NVIDIA GPU(s) on the PCI bus (0000:01:00.0) but the inventory declares 2",
        ),
        ("nvlink_degraded", "GPU 0: NVLink degraded, 3 of 4 links active (inactive: 3)"),
        (
            "version_mismatch_no_reboot",
            "rigup will not reboot this host because nvidia_reboot_allowed",
        ),
        ("dkms_failed", "the DKMS build of nvidia 580.178.04 failed for 7.0.0-44-generic (built)"),
        ("both_paths", "both driver install paths are on this host"),
        (
            "persistenced_masked",
            "nvidia-persistenced.service is masked (UnitFileState=masked): rigup enables and "
            "starts it (it sets persistence mode at boot, and rigup-gpu-power wants it); run "
            "`systemctl unmask nvidia-persistenced`",
        ),
        ("gpu_fell_off_the_bus", "GPU 1 at 0000:02:00.0 unreachable: the driver cannot reach it"),
        (
            "driver_not_loaded_secure_boot",
            "the NVIDIA kernel module is not loaded: Secure Boot is enforced and the module for "
            "7.0.0-44-generic is not signed",
        ),
        (
            "no_kernel_metapackage",
            "no installed kernel meta-package tracks the running kernel 7.0.0-44-generic",
        ),
        (
            "kv_cache_fp8_on_3090s",
            "vllm_kv_cache_dtype: fp8 (FP8 E4M3) needs compute capability 8.9 or newer and these "
            "GPUs are 8.6 (nvidia_gpu_compute_capability): vLLM would die at start-up: Triton "
            "builds FP8 E4M3 (fp8e4nv) kernels only for compute capability 8.9 and newer; an RTX "
            "3090 is 8.6 ('type fp8e4nv not supported in this architecture'). Fix: "
            'vllm_kv_cache_dtype = "fp8_e5m2"',
        ),
    ],
)
def test_refused_before_any_change(scenario, message):
    assert_refused_before_any_change(scenario, message)


def assert_refused_before_any_change(scenario: str, message: str) -> None:
    """Bad input stops the run while operations are prepared: no operation is ever executed."""
    proc = run_pyinfra(scenario, "-y", "deploys/full.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert message in out, out
    assert "nothing was changed" in out
    assert "Beginning operation run" not in out, "operations ran before the error"


def _nvidia_ops(parsed: dict) -> dict[str, str]:
    """NVIDIA layer operations of a plan: name -> "change" | "conditional" | "none"."""
    out = {}
    for op in parsed["plan"]:
        if op["name"].startswith("NVIDIA layer"):
            out[op["name"].split(" | ", 1)[1]] = (
                "change"
                if op["hosts_with_change"]
                else "conditional"
                if op["hosts_with_conditional_change"]
                else "none"
            )
    return out


def test_converged_rig_installs_nothing_and_does_not_reboot():
    """Driver, holds, units: all answered as converged by the fake host (the file contents of
    units and scripts cannot be answered by @fake; the lab checks those for real)."""
    rc, parsed, err = plan("converged_rig", "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    assert (
        ops["NVIDIA driver | Driver nvidia-driver-580-open + linux-modules-nvidia-580-open-generic"]
        == "none"
    )
    assert ops["NVIDIA driver | Hold the driver packages (apt-mark hold)"] == "none"
    assert not any("Reboot" in name or "Driver loaded and consistent" in name for name in ops)
    for unit in (
        "nvidia-persistenced.service enabled and running",
        "rigup-gpu-power.service enabled and applied",
    ):
        assert ops[f"GPU power and persistence | {unit}"] == "none"
    assert ops["NVLink | rigup-nvlink.service enabled and verified"] == "none"
    assert "warning" not in err.lower() or "NVIDIA:" not in err


def test_a_tool_trees_lib_holds_the_package_rigup_alone():
    """What else is in the NVIDIA layer's ``lib`` beside the package rigup is removed; the
    package and the directory itself stay."""
    lib = "/opt/rigup/nvidia/lib"
    removals = {}
    for scenario in ("converged_rig", "former_host_libraries"):
        rc, parsed, err = plan(scenario, "deploys/nvidia.py")
        assert rc == 0, err
        removals[scenario] = sorted(
            op["name"].rsplit(" remove ", 1)[1]
            for op in parsed["plan"]
            if f"Only the package rigup in {lib}: remove" in op["name"]
        )
    assert removals == {
        "converged_rig": [],
        "former_host_libraries": [
            f"{lib}/rigup_diagnosis",
            f"{lib}/rigup_nvidia",
            f"{lib}/rigup_units.py",
        ],
    }


MATH_HEADER_OP = (
    "CUDA toolkit | include/crt/math_functions.h: rsqrt/rsqrtf noexcept where glibc >= 2.42"
)


@pytest.mark.parametrize(
    "scenario,planned",
    [
        ("fresh_rig", "change"),  # edited once the toolkit is installed (glibc 2.43)
        ("converged_rig", "none"),  # already edited
        ("toolkit_reinstalled", "change"),  # a venv built again is edited again
        ("older_glibc_rig", "none"),  # glibc 2.41 declares no rsqrt: left as NVIDIA ships it
    ],
)
def test_cuda_math_header_edited_on_every_run_only_where_needed(scenario, planned):
    rc, parsed, err = plan(scenario, "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    names = list(ops)
    assert names.index(MATH_HEADER_OP) > names.index(
        "CUDA toolkit | CUDA toolkit venv (cuda-toolkit 13.0.2 wheels; uv, locked)"
    )
    assert ops[MATH_HEADER_OP] == planned


@pytest.mark.parametrize(
    "scenario", ["fresh_rig_nvidia_repo", "secure_boot_ubuntu", "nouveau_loaded"]
)
def test_other_fresh_boxes_plan_the_driver(scenario):
    rc, parsed, err = plan(scenario, "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    assert ops["NVIDIA driver | Reboot to load the NVIDIA driver"] == "conditional"
    if scenario == "fresh_rig_nvidia_repo":
        assert (
            ops["NVIDIA driver | Download cuda-keyring_1.1-1_all.deb (sha256 pinned)"] == "change"
        )
        assert ops["NVIDIA driver | Driver nvidia-open"] == "change"
        assert ops["NVIDIA driver | Hold NVIDIA's repository to driver branch 580"] == "change"
    if scenario == "nouveau_loaded":
        assert (
            "the NVIDIA kernel module is not loaded: nouveau (the open-source driver) is loaded "
            "and bound to the GPUs" in err
        )


def test_version_mismatch_reboots_unconditionally_reasoned():
    rc, parsed, err = plan("version_mismatch", "deploys/nvidia.py")
    assert rc == 0, err
    assert "Driver/library version mismatch" in err and "the run reboots the host for it" in err
    assert "NVIDIA driver | Reboot to load the NVIDIA driver" in _nvidia_ops(parsed)


def test_nvlink_optional_degraded_converges_with_p2p_off():
    rc, parsed, err = plan("nvlink_degraded_optional", "deploys/nvidia.py")
    assert rc == 0, err
    assert "NVLink not verified" in err and "P2P and custom all-reduce off" in err


@pytest.mark.parametrize("component", ["base", "nvidia", "model", "vllm", "comfyui", "modes"])
def test_each_component_deploy_plans_alone(component):
    rc, parsed, err = plan("fresh_rig", f"deploys/{component}.py")
    assert rc == 0, err
    assert changes(parsed), f"deploys/{component}.py planned nothing on a fresh host"


def test_hwe_desktop_gets_the_hwe_modules_and_holds():
    """Field report: `uname -r` 7.0.0-44-generic with linux-generic-hwe-26.04 (Ubuntu Desktop)
    was given linux-modules-nvidia-580-open-generic and no kernel package held."""
    rc, parsed, err = plan("fresh_desktop_hwe", "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    name = "NVIDIA driver | Driver nvidia-driver-580-open + linux-modules-nvidia-580-open-generic-hwe-26.04"
    assert ops[name] == "change"
    # which packages it holds: tests/unit/test_nvidia_role.py test_driver_held_*
    assert ops["NVIDIA driver | Hold the driver packages (apt-mark hold)"] == "change"


def test_shim_validation_disabled_is_not_enforced():
    """Field report: "SecureBoot enabled" + "SecureBoot validation is disabled in shim" refused
    the NVIDIA repository path; it is not enforced: the run goes ahead with a note."""
    rc, parsed, err = plan("shim_validation_disabled_nvidia_repo", "deploys/nvidia.py")
    assert rc == 0, err
    assert "note: Secure Boot is on in the firmware but not enforced" in err
    assert _nvidia_ops(parsed)["NVIDIA driver | Driver nvidia-open"] == "change"
