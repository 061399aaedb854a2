"""GPU modes: the per-GPU VRAM budget (pure), the ModeTargets fact on captured systemctl output,
and the rendered targets, units and switch command."""

from __future__ import annotations

import subprocess
from pathlib import Path

import jinja2

from roles.modes import ModeTargets, mode_services
from roles.modes.budget import MODES, budget_problems, budget_report, mode_shares, per_gpu
from roles.settings import validate

FILES = Path(__file__).resolve().parents[2] / "files"


def _render(path: Path, **values) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(path.read_text()).render(**values)


def _gib(settings: dict, mode: str) -> dict[int, float]:
    return {
        gpu: round(sum(s.gib for s in shares), 3)
        for gpu, shares in per_gpu(mode_shares(settings)[mode]).items()
    }


# ---- budget ------------------------------------------------------------------------------------
def test_shipped_settings_fit_both_modes(settings):
    assert budget_problems(settings) == []
    # seed: ~23.4 GB in use per card at TP=2 (0.94 x 24 GiB + 0.8 GiB context)
    assert _gib(settings, "llm") == {0: 23.36, 1: 23.36}
    # ComfyUI takes its card but for the 1 GiB --reserve-vram; VoxCPM2 ~8 GiB on the other
    assert _gib(settings, "media") == {0: 23.0, 1: 8.0}


def test_voxcpm_on_the_other_card_fits(settings):
    settings |= {"voxcpm_vram_gib": 8.0, "voxcpm_gpu_index": 1}
    assert budget_problems(settings) == []
    assert _gib(settings, "media") == {0: 23.0, 1: 8.0}


def test_voxcpm_beside_comfyui_is_refused_with_numbers(settings):
    settings |= {"voxcpm_vram_gib": 8.0, "voxcpm_gpu_index": 0}
    (problem,) = budget_problems(settings)
    assert problem.startswith("VRAM budget: media mode oversubscribes GPU 0: 31.0 of 24 GiB")
    assert "comfyui 23.0 GiB = 24 GiB card - 1 GiB comfyui_reserve_vram_gib" in problem
    assert "voxcpm 8.0 GiB = voxcpm_vram_gib estimate" in problem


def test_voxcpm_fits_beside_comfyui_inside_a_large_enough_reserve(settings):
    settings |= {"voxcpm_vram_gib": 8.0, "voxcpm_gpu_index": 0, "comfyui_reserve_vram_gib": 8.0}
    assert budget_problems(settings) == []
    assert _gib(settings, "media") == {0: 24.0}


def test_vllm_oversubscription_names_each_gpu(settings):
    settings["vllm_gpu_memory_utilization"] = 0.99
    problems = budget_problems(settings)
    assert [p.split(":")[1].strip() for p in problems] == [
        "llm mode oversubscribes GPU 0",
        "llm mode oversubscribes GPU 1",
    ]
    assert "vllm 24.6 GiB = 0.99 x 24 GiB + 0.8 GiB CUDA context" in problems[0]


def test_cpu_or_absent_comfyui_takes_no_vram(settings):
    settings["comfyui_cpu"] = True
    assert [s.service for s in mode_shares(settings)["media"]] == ["voxcpm"]
    settings |= {"comfyui_cpu": False, "comfyui_install": False}
    assert [s.service for s in mode_shares(settings)["media"]] == ["voxcpm"]


def test_gpu_index_beyond_the_declared_gpus_is_refused(settings):
    settings["comfyui_gpu_index"] = 2
    (problem,) = budget_problems(settings)
    assert problem == (
        "comfyui_gpu_index: GPU 2 does not exist on a host that declares 2 GPU(s) "
        "(nvidia_gpu_count); use 0..1 (the media mode runs comfyui there)"
    )


def test_budget_is_part_of_settings_validation(settings):
    """Every deploy calls require_valid_settings first, so an oversubscribed plan stops there."""
    settings |= {"voxcpm_vram_gib": 8.0, "voxcpm_gpu_index": 0}
    (problem,) = validate(settings)
    assert "media mode oversubscribes GPU 0" in problem


def test_budget_holds_on_a_host_without_gpus_too(settings):
    """The lab declares no GPU but converges the rig's numbers: a bad budget fails there too."""
    settings |= {"nvidia_gpu_count": 0, "vllm_gpu_memory_utilization": 0.99}
    assert len(budget_problems(settings)) == 2


def test_budget_report_lines(settings):
    report = budget_report(settings)
    assert report["llm"][0] == (
        "GPU 0: 23.4 of 24 GiB (vllm 23.4 GiB = 0.94 x 24 GiB + 0.8 GiB CUDA context)"
    )
    assert set(report) == set(MODES)


# ---- which services each mode holds --------------------------------------------------------------
def test_mode_services(settings):
    assert mode_services(settings) == {
        "llm": ["vllm.service"],
        "media": ["comfyui.service", "voxcpm.service"],
    }
    settings |= {"voxcpm_vram_gib": 8.0, "comfyui_install": False}
    assert mode_services(settings) == {"llm": ["vllm.service"], "media": ["voxcpm.service"]}


# ---- ModeTargets fact (output captured from the lab machine) --------------------------------------
def test_mode_targets_fact_parses_systemctl_output():
    out = [
        "@target rigup-llm.target inactive",
        "@target rigup-media.target active",
        "@wants rigup-media.target comfyui.service activating",
    ]
    assert ModeTargets().process(out) == {
        "rigup-llm.target": {"state": "inactive", "wants": {}},
        "rigup-media.target": {"state": "active", "wants": {"comfyui.service": "activating"}},
    }


def test_mode_targets_fact_on_a_fresh_host():
    out = ["@target rigup-llm.target inactive", "@target rigup-media.target inactive"]
    fact = ModeTargets().process(out)
    assert all(t["state"] == "inactive" and not t["wants"] for t in fact.values())


# ---- rendered units and command ------------------------------------------------------------------
def _targets() -> dict[str, str]:
    rendered = {}
    for i, (mode, target) in enumerate(MODES.items()):
        rendered[target] = _render(
            FILES / "modes" / "rigup-mode.target.j2",
            mode_name=mode,
            services=["vllm.service"] if mode == "llm" else ["comfyui.service"],
            others=[t for t in MODES.values() if t != target],
            order_after=i > 0,
        )
    return rendered


def test_targets_conflict_and_are_ordered_one_way():
    llm, media = _targets().values()
    assert "Conflicts=rigup-media.target" in llm and "Conflicts=rigup-llm.target" in media
    # one ordering edge: systemd stops the old mode before starting the new one, either way
    assert "After=rigup-llm.target" in media and "After=rigup-media" not in llm
    for text in (llm, media):
        assert "DefaultDependencies=no" in text and "WantedBy=multi-user.target" in text


def test_service_units_belong_to_their_mode():
    text = (FILES / "common" / "service.unit.j2").read_text()
    for line in ("Requires={{ target }}", "PartOf={{ target }}", "WantedBy={{ target }}"):
        assert line in text, f"the service unit template lacks {line}"
    assert "After={{ target }}" in text
    assert "WantedBy=multi-user.target" not in text, "a GPU service must start with its mode only"


def test_switch_command_renders_to_valid_sh(tmp_path):
    script = _render(
        FILES / "modes" / "rigup-mode.j2",
        modes={"llm": ["vllm.service"], "media": ["comfyui.service", "voxcpm.service"]},
        names=list(MODES),
        default="llm",
        rigup_start="/opt/rigup/bin/rigup-start",
    )
    path = tmp_path / "rigup-mode"
    path.write_text(script)
    assert subprocess.run(["sh", "-n", str(path)]).returncode == 0
    assert "llm) ;;" in script and "media) ;;" in script
    path.chmod(0o755)
    bad = subprocess.run([str(path), "turbo"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage: rigup-mode [llm|media]" in bad.stderr


def test_a_bad_voxcpm_value_is_named_not_crashed_on(settings):
    settings["voxcpm_vram_gib"] = "eight"
    assert validate(settings) == ["voxcpm_vram_gib: must be a number, got 'eight'"]
