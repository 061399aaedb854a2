"""Plans of the GPU modes and ComfyUI on @fake hosts: which mode a run starts or keeps, what is
held back without GPUs, and oversubscribed configurations refused before any change."""

from __future__ import annotations

import pytest

from tests.plans.test_plans import REPO, changes, conditional, plan, run_pyinfra

MODE_OP = "GPU modes | A mode is running (llm when none is)"


def _ops(parsed: dict) -> list[str]:
    return [op["name"] for op in parsed["plan"]]


def test_running_llm_mode_is_kept_and_restarts_only_on_change():
    rc, parsed, err = plan("llm_mode_running")
    assert rc == 0, err
    assert MODE_OP not in changes(parsed), "a running mode must not be started again"
    # vllm.service runs: a change of its inputs restarts it (conditional), ComfyUI is down: not.
    assert "vLLM | Restart vllm.service if running (its inputs changed)" in conditional(parsed)
    assert "ComfyUI | Restart comfyui.service if running (its inputs changed)" not in (
        conditional(parsed) + changes(parsed)
    )


def test_a_service_running_an_older_configuration_is_restarted_by_the_next_run():
    """A converge interrupted between writing vllm.service's inputs and its
    restart; the next run plans the restart unconditionally (a dry run shows it), where a
    service that runs what is on disk restarts only on a change of this run."""
    rc, parsed, err = plan("llm_mode_stale")
    assert rc == 0, err
    assert "vLLM | Restart vllm.service if running (its inputs changed)" in changes(parsed)
    assert "runs an older configuration than the one on disk (/etc/rigup/vllm/vllm.env" in err
    rc, fresh, err = plan("llm_mode_running")
    assert "vLLM | Restart vllm.service if running (its inputs changed)" not in changes(fresh)


def test_a_restart_onto_a_full_file_system_is_refused_before_any_change():
    """A full file system: vllm.service serves and this run changes its inputs (a restart is
    planned), but its TMPDIR is a full 64 MiB tmpfs (the lab's df): the run stops at planning,
    naming the path, free vs needed GiB and the figure's source; the same rig with room plans
    the restart (llm_mode_running)."""
    proc = run_pyinfra("llm_mode_disk_full", "--dry", "deploys/full.py")
    assert proc.returncode != 0
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "not enough free space to restart vllm.service" in out
    assert "(nothing was changed)" in out
    assert (
        "/var/lib/rigup/vllm/tmp (file system /var/lib/rigup/vllm/tmp): 0.0010 GiB free of "
        "0.06 GiB, 2 GiB needed: a start of vllm.service" in out
    )
    assert "the doctor's disk/full threshold" in out and "134 MiB in tmp" in out
    assert "file system /:" not in out  # the root file system has room for the venv and start
    rc, parsed, err = plan("llm_mode_running")
    assert rc == 0, err


def test_a_crash_loop_is_down_not_converged():
    """vllm.service in ``activating (auto-restart)`` counts as down: the run starts it (through
    rigup-start: tests/operations/mode_active/crash_loop_counts_as_down.json), which fails naming
    the unit with its journal unless it comes up."""
    rc, parsed, err = plan("llm_mode_crash_loop")
    assert rc == 0, err
    assert MODE_OP in changes(parsed), "a crash-looping service was taken for a running one"


def test_mode_switched_by_the_user_is_not_reverted():
    rc, parsed, err = plan("media_mode_by_user")
    assert rc == 0, err
    assert MODE_OP not in changes(parsed), "deploy switched the user's media mode back to llm"
    assert "ComfyUI | Restart comfyui.service if running (its inputs changed)" in conditional(
        parsed
    )
    assert "vLLM | Restart vllm.service if running (its inputs changed)" not in conditional(parsed)


def test_fresh_rig_starts_the_default_mode_and_prints_the_budget():
    proc = run_pyinfra("fresh_rig", "--dry", "deploys/full.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "VRAM budget, llm mode: GPU 0: 23.4 of 24 GiB" in out
    assert "VRAM budget, llm mode: GPU 1: 23.4 of 24 GiB" in out
    assert "VRAM budget, media mode: GPU 0: 23.0 of 24 GiB (comfyui 23.0 GiB" in out


def test_cpu_comfyui_runs_where_gpu_services_are_held_back():
    """The lab's shape: vLLM stays out of its target, ComfyUI (--cpu) is linked into media."""
    rc, parsed, err = plan("comfyui_on_cpu_no_gpu")
    assert rc == 0, err
    names = _ops(parsed)
    assert "vLLM | vllm.service installed, not started (no GPUs or no driver)" in names
    assert "ComfyUI | comfyui.service enabled in rigup-media.target (runs in the media mode)" in (
        changes(parsed)
    )
    assert "GPU modes | rigup-media.target is the boot mode" in changes(parsed)
    assert "GPU modes | A mode is running (media when none is)" in changes(parsed)


@pytest.mark.parametrize(
    "scenario,messages",
    [
        (
            "media_oversubscribed",
            [
                "VRAM budget: media mode oversubscribes GPU 0: 31.0 of 24 GiB",
                "comfyui 23.0 GiB = 24 GiB card - 1 GiB comfyui_reserve_vram_gib",
                "voxcpm 8.0 GiB = voxcpm_vram_gib estimate",
            ],
        ),
        (
            "llm_oversubscribed",
            [
                "VRAM budget: llm mode oversubscribes GPU 0: 24.6 of 24 GiB",
                "VRAM budget: llm mode oversubscribes GPU 1: 24.6 of 24 GiB",
                "vllm 24.6 GiB = 0.99 x 24 GiB + 0.8 GiB CUDA context",
            ],
        ),
        ("comfyui_highvram", ["comfyui_extra_args: --highvram keeps every model in VRAM"]),
    ],
)
def test_oversubscribed_or_offload_defeating_config_refused_before_any_change(scenario, messages):
    proc = run_pyinfra(scenario, "-y", "deploys/full.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for message in messages:
        assert message in out, out
    assert "nothing was changed" in out
    assert "Beginning operation run" not in out, "operations ran before the error"


@pytest.mark.parametrize("deploy", ["deploys/vllm.py", "deploys/comfyui.py", "deploys/modes.py"])
def test_partial_deploys_refuse_an_oversubscribed_config_too(deploy):
    proc = run_pyinfra("media_oversubscribed", "-y", deploy)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "VRAM budget: media mode oversubscribes GPU 0" in out, out
    assert "Beginning operation run" not in out


def test_a_comfyui_release_without_a_lock_is_locked_by_its_first_run():
    """comfyui_release names a tag with no lock here: the host checks out the commit the tag
    names, compiles its requirements with every hash, builds the venv from that, and the lock is
    written on this controller, where the run says."""
    rc, parsed, err = plan("comfyui_new_release", "deploys/comfyui.py")
    assert rc == 0, err
    names = changes(parsed)
    first_run = [
        "ComfyUI | ComfyUI source at release v0.22.0 (first run: its commit resolved on the host)",
        "ComfyUI | ComfyUI v0.22.0 requirements locked (uv pip compile --generate-hashes)",
        "ComfyUI | ComfyUI venv (ComfyUI v0.22.0 requirements; uv, locked on this run)",
        "ComfyUI | ComfyUI v0.22.0 release lock written on the controller",
    ]
    assert [n for n in names if n in first_run] == first_run
    assert not any("ComfyUI lock file" in n for n in names), "no lock of the controller's is put"
    releases = REPO / "files" / "comfyui" / "releases"
    assert f"the lock is written to {releases}/v0.22.0.toml" in " ".join(err.split())
