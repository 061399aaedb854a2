"""The media mode's journals (ComfyUI, VoxCPM2) read with their own signatures and fixes in
their own settings, per unit, by rigup-doctor and rigup-explain (rigup/units.py);
tests/fixtures/media (README.md there) and constructed lines of the same kinds."""

from __future__ import annotations

import pytest

from rigup import diagnosis, units
from tests.captures import FIXTURES


def journal(name: str) -> list[str]:
    return (FIXTURES / "media" / name).read_text().splitlines()


def running(unit: str) -> dict:
    return units.unit_state(
        {
            "Id": unit,
            "LoadState": "loaded",
            "ActiveState": "active",
            "SubState": "running",
            "NRestarts": "0",
            "UnitFileState": "enabled",
        },
        mode="media",
        mode_active=True,
    )


def test_comfyuis_ltx_text_encoder_oom_is_named_with_comfyuis_fix():
    (v,) = diagnosis.classify_service_log(
        "comfyui-log", "\n".join(journal("comfyui-ltx-text-encoder-oom.log"))
    )
    assert v.id == "comfyui-oom" and v.severity == diagnosis.FAIL
    assert "(tried to allocate 226.00 MiB) in audio_embeddings_connector" in v.what
    assert "#12047" in v.why and '"--novram"' in v.fix and "comfyui_extra_args" in v.fix
    assert "vllm_" not in str(v)  # not the vLLM rules' fix


def test_a_running_comfyui_with_an_oom_in_its_run_is_not_up():
    found = units.explain(running("comfyui.service"), journal("comfyui-ltx-text-encoder-oom.log"))
    assert [v.id for v in found] == ["service/up-failing", "comfyui-oom"]
    assert found[0].severity == diagnosis.WARN and "logged a failure" in found[0].what
    assert diagnosis.worst(found) == diagnosis.FAIL
    # the same unit with a clean run is up
    clean = units.explain(
        running("comfyui.service"), ["got prompt", "Prompt executed in 3.1 seconds"]
    )
    assert [v.id for v in clean] == ["service/up"]


def test_an_old_comfyui_loading_ltx_2_3_names_the_release_key():
    verdicts = diagnosis.classify_service_log(
        "comfyui-log", "\n".join(journal("comfyui-old-release-ltx-2.3.log"))
    )
    assert verdicts[0].id == "comfyui-model-mismatch/ltx-2.3"
    assert "adaln_single.linear.bias" in verdicts[0].what
    assert "comfyui_release" in verdicts[0].fix and "#12773" in verdicts[0].fix
    assert "2026-03-05" in verdicts[0].fix


def test_another_size_mismatch_is_a_model_newer_than_the_release():
    line = (
        "\tsize mismatch for double_blocks.0.img_mod.lin.weight: copying a param with shape "
        "torch.Size([18432, 3072]) from checkpoint, the shape in current model is "
        "torch.Size([9216, 3072])."
    )
    (v,) = diagnosis.classify_service_log("comfyui-log", line)
    assert v.id == "comfyui-model-mismatch" and "double_blocks.0.img_mod.lin.weight" in v.what
    assert "torch.Size([18432, 3072])" in v.why and "comfyui_release" in v.fix


@pytest.mark.parametrize(
    ("line", "sig_id", "setting"),
    [
        ("!!! Exception during processing !!! Allocation on device", "comfyui-oom", "--novram"),
        ("Cannot import /srv/rigup/comfyui/custom_nodes/ComfyUI-LTXVideo module for custom nodes: "
         "No module named 'q8_kernels'", "comfyui-custom-node", "custom_nodes"),
        ("main.py: error: unrecognized arguments: --gpu-onyl", "comfyui-bad-argument",
         "comfyui_extra_args"),
        ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8188): "
         "address already in use", "comfyui-port-in-use", "comfyui_port"),
    ],
)  # fmt: skip
def test_comfyuis_other_signatures(line, sig_id, setting):
    (v,) = diagnosis.classify_service_log("comfyui-log", line)
    assert v.id == sig_id and setting in v.fix


@pytest.mark.parametrize(
    ("line", "sig_id", "setting"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a "
         "total capacity of 23.56 GiB", "voxcpm-oom", "voxcpm_gpu_index"),
        ("voxcpm_server: /var/lib/rigup/models/voxcpm2/config.json does not exist: the VoxCPM2 "
         "model is not placed there", "voxcpm-model-dir", "voxcpm_model_manifest"),
        ("ERROR voxcpm_server: loading the voxcpm synthesizer failed", "voxcpm-load-failed",
         "requirements.lock"),
        ("ERROR voxcpm_server: synthesis failed", "voxcpm-synthesis-failed", "reference recording"),
        ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8100): "
         "address already in use", "voxcpm-port-in-use", "voxcpm_port"),
    ],
)  # fmt: skip
def test_voxcpms_signatures(line, sig_id, setting):
    (v,) = diagnosis.classify_service_log("voxcpm-log", line)
    assert v.id == sig_id and setting in v.fix
    assert "vllm_" not in v.fix


def test_each_unit_is_read_with_its_own_source():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 226.00 MiB."
    by_unit = {
        unit: [v.id for v in units.explain(running(unit), [oom]) if v.source != "unit-state"]
        for unit in ("vllm.service", "comfyui.service", "voxcpm.service")
    }
    assert by_unit == {
        "vllm.service": ["vllm-oom/cuda"],
        "comfyui.service": ["comfyui-oom"],
        "voxcpm.service": ["voxcpm-oom"],
    }
