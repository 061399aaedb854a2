"""benchmarks/comfyui-gpu's figures, read from the captures of the H200 runs of 2026-12-03
(tests/fixtures/media/h200-*: ComfyUI 0.30.0 with rigup's arguments under the 24 GiB cap)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "comfyui-gpu"
sys.path.insert(0, str(BENCH))

from comfygpu import summary  # noqa: E402

MEDIA = Path(__file__).resolve().parents[1] / "fixtures" / "media"
RUNS = sorted(p for p in MEDIA.glob("h200-*") if (p / "comfyui.log").exists())


def _log(run: str) -> str:
    return (MEDIA / run / "comfyui.log").read_text(errors="replace")


def test_flux2_default_run_facts_from_comfyuis_own_lines():
    facts = summary.log_facts(_log("h200-flux2-default"))
    assert facts["total_vram_mb"] == 24576  # the cap's total, not the H200's 143771 MiB
    assert facts["vram_state"] == "NORMAL_VRAM"
    assert facts["dynamic_vram_enabled"] is True
    assert facts["requested"] == ["Flux2TEModel_", "Flux2", "AutoencoderKL"]
    assert {"model": "Flux2", "staged_mb": 31509} in facts["dynamic_vram"]
    assert facts["executed_s"] == [29.0]
    assert [(b["done"], b["steps"]) for b in facts["progress"]] == [(20, 20)]
    assert facts["progress"][0]["s_per_step"] == pytest.approx(0.431, abs=0.001)
    assert facts["errors"] == [] and facts["oom"] is False


def test_legacy_offload_lines_are_kept_verbatim():
    facts = summary.log_facts(_log("h200-ltx-nodynamic"))
    assert "dynamic_vram_enabled" not in facts
    assert facts["loaded"][0].startswith("loaded partially; 21087.56 MB usable, 20937.56 MB loaded")
    assert "4503.04 MB offloaded" in facts["loaded"][0]
    assert facts["unloaded"][-1].startswith("Unloaded partially: 6587.56 MB freed")


def test_the_transformers_failure_is_one_exception_block_and_the_workflow_error():
    facts = summary.log_facts(_log("h200-flux2-image-transformers"))
    assert len(facts["errors"]) == 1
    block = facts["errors"][0]
    assert "!!! Exception during processing !!!" in block
    assert "TypeError: MistralConverter.__init__() missing 1 required positional argument" in block
    result = json.loads(
        (MEDIA / "h200-flux2-image-transformers" / "result-flux2-dev-t2i.json").read_text()
    )
    out = summary.workflow_times(result)
    assert out["status"] == "error"
    assert out["error"]["node_type"] == "CLIPLoader"
    assert out["error"]["exception_type"] == "TypeError"


@pytest.mark.parametrize("run", [p.name for p in RUNS])
def test_the_cap_held_in_every_run(run):
    """nvidia-smi's device peak above the ballast never passed what the ballast left free, and
    ComfyUI's own process stayed under it (per-process samples)."""
    d = MEDIA / run
    record = json.loads((d / "record.json").read_text())
    ballast = json.loads((d / "ballast.json").read_text())
    smi = summary.smi_peak((d / "smi-gpu.csv").read_text())
    free_mib = ballast["free_after"] / 2**20
    assert smi["used_max_mib"] - record["smi_used_before_comfyui_mib"] <= free_mib
    proc = summary.apps_peak((d / "smi-apps.csv").read_text(), record["comfyui_pid"])
    assert proc is not None and proc <= free_mib
    assert ballast["free_at_exit"] == ballast["free_after"]


def test_progress_bars_keep_the_last_state_and_invert_it_per_s():
    text = (
        "\r  0%|   | 0/4 [00:00<?, ?it/s]\r 50%|#  | 2/4 [00:01<00:01,  2.00it/s]"
        "\r100%|###| 4/4 [00:02<00:00,  2.00it/s]\r100%|###| 4/4 [00:02<00:00,  1.98it/s]\n"
        "\r 50%|#  | 1/2 [00:03<00:03,  3.00s/it]\r100%|###| 2/2 [00:06<00:00,  3.10s/it]\n"
    )
    bars = summary.progress_bars(text)
    assert [(b["done"], b["steps"]) for b in bars] == [(4, 4), (2, 2)]
    assert bars[0]["s_per_step"] == pytest.approx(1 / 1.98)
    assert bars[1]["s_per_step"] == 3.10 and bars[1]["mean_s_per_step"] == 3.0


def test_torch_samples_give_the_peak_reserved_and_least_free():
    d = MEDIA / "h200-ltx-nodynamic"
    peak = summary.torch_peak((d / "torch-samples.jsonl").read_text())
    assert peak["max_memory_reserved"] > 20 * 2**30  # legacy loading holds weights in torch's pool
    assert peak["driver_free_min"] < 2**30
