"""model role: every placed model (the LLM, VoxCPM2's, ComfyUI's) checked byte for byte against
its manifest, lock and record; the checkpoint's text-only edit and vLLM's verdict on it; the
model tool venv and the token files."""

import json
import shlex
from pathlib import Path

from roles.model import PLACEMENT_RECORD, placed_path
from roles.model.commands import placed_problems, verify_argv
from roles.model.manifest import load_manifest
from roles.model.patch import patch_for
from roles.services import host_manifests


def test_checkpoint_placed_read_only(host, data, llm_dir):
    d = host.file(llm_dir)
    assert d.is_directory, f"no checkpoint at {llm_dir}: run deploys/model.py"
    assert d.user == "root", f"{d.path} owned by {d.user}: services must not be able to change it"
    revision = load_manifest(data.get("model_llm_manifest")).revision
    partial = f"{llm_dir.rsplit('/', 1)[0]}/.{revision}.partial"
    assert not host.file(partial).exists, (
        f"an interrupted copy is left at {partial}: re-run deploys/model.py"
    )
    for name in ("config.json", "model.safetensors.index.json", "tokenizer_config.json"):
        f = f"{llm_dir}/{name}"
        out = host.run(f"runuser -u {data.get('vllm_user')} -- test -r {f}")
        assert out.rc == 0, f"{data.get('vllm_user')} cannot read {f}"


def test_every_indexed_shard_present(host, llm_dir):
    index_file = host.file(f"{llm_dir}/model.safetensors.index.json")
    assert index_file.exists, f"{index_file.path} is missing: is {llm_dir} a checkpoint?"
    index = json.loads(index_file.content_string)
    shards = sorted(set(index["weight_map"].values()))
    missing = [s for s in shards if not host.file(f"{llm_dir}/{s}").exists]
    assert not missing, f"shards named in the index but missing: {missing}"


def test_config_holds_the_text_only_edit(host, data, llm_dir):
    method = data.get("vllm_text_only_method")
    config = json.loads(host.file(f"{llm_dir}/config.json").content_string)
    kept = host.file(f"{llm_dir}/config.json.rigup-orig")
    original = json.loads(kept.content_string) if kept.exists else config
    assert config == patch_for(method)(original), (
        f"config.json does not hold the {method} edit of the original (unpatched model?): "
        "re-run deploys/model.py"
    )
    if method == "strip_vision_config":
        assert "vision_config" not in config and "vision_config" in original, (
            "strip_vision_config: config.json must lack vision_config and the kept original "
            "(config.json.rigup-orig) must have it"
        )


def test_vllm_serves_it_text_only(host, data, llm_dir, vllm_paths):
    """vLLM 0.22.1's own config code, run as the service user, must see a text-only model."""
    python = f"{vllm_paths.venv}/bin/python"
    method = data.get("vllm_text_only_method")
    out = host.run(
        f"runuser -u {data.get('vllm_user')} -- env HOME={vllm_paths.home} HF_HUB_OFFLINE=1 "
        f"{python} {vllm_paths.bin}/text_only_check.py {llm_dir} --method {method}"
    )
    assert out.rc == 0, f"vLLM would not serve {llm_dir} text-only: {out.stdout}{out.stderr[-600:]}"
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert verdict["text_only"] is True, f"vLLM's verdict: {verdict.get('reasons')}"


def _placed(data) -> list[tuple[str, str]]:
    """(manifest, placed directory) of every model the settings place on the host."""
    return [(ref, placed_path(data, ref)) for ref in host_manifests(data)]


def test_every_placed_model_matches_its_manifest_lock_and_record(host, data):
    """Sizes, the sha256 recorded at placement against the manifest's or lock's, and nothing in
    a placed model that is not the model's (no *.incomplete, no *.bad, no file put there by
    hand); nothing left beside it of an unfinished transfer."""
    problems = []
    for ref, path in _placed(data):
        manifest = load_manifest(ref, data.get("model_lock_dir"))
        record_file = host.file(f"{path}/{PLACEMENT_RECORD}")
        if not record_file.exists:
            problems.append(f"{path}: not placed (no {PLACEMENT_RECORD}): run the deploy")
            continue
        record = json.loads(record_file.content_string)
        if record["manifest"]["name"] != manifest.name:
            problems.append(f"{path}: the record is of {record['manifest']['name']}")
        out = host.run(f"cd {shlex.quote(path)} && find . -type f -printf '%s %P\\n'")
        sizes = {
            rel: int(size)
            for size, _, rel in (line.partition(" ") for line in out.stdout.splitlines())
        }
        problems += [f"{path}/{p}" for p in placed_problems(manifest, record, sizes)]
        parent, revision = path.rsplit("/", 1)
        for leftover in (f".{revision}.partial", f".{revision}.rejected", f".{revision}.repair"):
            if host.file(f"{parent}/{leftover}").exists:
                problems.append(f"{parent}/{leftover}: left by an unfinished transfer")
    assert not problems, "placed models differ from their manifests:\n" + "\n".join(problems)


def test_every_placed_model_verifies_byte_for_byte(host, data):
    """model_fetch.py verify on every placed model: every file hashed against the sha256
    recorded when it was placed, every shard its index names present, no stray file."""
    problems, checked = [], 0
    for _ref, path in _placed(data):
        out = host.run(verify_argv(data, path))
        lines = out.stdout.strip().splitlines()
        if not lines:
            problems.append(f"{path}: model_fetch.py verify did not run: {out.stderr[-400:]}")
            continue
        verdict = json.loads(lines[-1])
        checked += verdict["sha256_checked"]
        problems += [f"{path}/{p}" for p in verdict["problems"]]
        if verdict["sha256_checked"] == 0:
            problems.append(f"{path}: no file was hashed")
    assert not problems, "placed models do not verify:\n" + "\n".join(problems)
    assert checked > 0


def test_model_tool_venv_has_the_pinned_libraries(host, model_paths):
    out = host.run(
        f"{model_paths.python} -c 'import huggingface_hub, hf_xet, modelscope; "
        "print(huggingface_hub.__version__, modelscope.__version__)'"
    )
    assert out.rc == 0, f"model tool venv broken ({out.stderr[-300:]}): run deploys/model.py"
    lock = (Path(__file__).resolve().parents[2] / "files/model/requirements.in").read_text()
    hub, ms = out.stdout.split()
    assert f"huggingface_hub=={hub}" in lock and f"modelscope=={ms}" in lock


def test_secrets_stay_private(host, model_paths):
    d = host.file(model_paths.secrets_dir)
    assert d.is_directory and d.mode == 0o700 and d.user == "root", (
        f"{model_paths.secrets_dir} must be root-only (0700): run deploys/model.py"
    )
    for path in (model_paths.hf_token_file, model_paths.modelscope_token_file):
        token = host.file(path)
        if token.exists:
            assert token.mode == 0o600 and token.user == "root", f"{path} must be 0600 root"
