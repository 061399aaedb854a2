"""model role: the placed checkpoint, its text-only edit, and vLLM's verdict on it."""

import json

from roles.model.patch import patch_for


def test_checkpoint_placed_read_only(host, data, paths):
    d = host.file(paths.model_dir)
    assert d.is_directory, f"no checkpoint at {paths.model_dir}: run deploys/model.py"
    assert d.user == "root", f"{d.path} owned by {d.user}: services must not be able to change it"
    partial = f"{paths.model_dir}/../.{data.get('model_revision')}.partial"
    assert not host.file(partial).exists, (
        f"an interrupted copy is left at {partial}: re-run deploys/model.py"
    )
    for name in ("config.json", "model.safetensors.index.json", "tokenizer_config.json"):
        f = f"{paths.model_dir}/{name}"
        out = host.run(f"runuser -u {data.get('vllm_user')} -- test -r {f}")
        assert out.rc == 0, f"{data.get('vllm_user')} cannot read {f}"


def test_every_indexed_shard_present(host, paths):
    index_file = host.file(f"{paths.model_dir}/model.safetensors.index.json")
    assert index_file.exists, f"{index_file.path} is missing: is {paths.model_dir} a checkpoint?"
    index = json.loads(index_file.content_string)
    shards = sorted(set(index["weight_map"].values()))
    missing = [s for s in shards if not host.file(f"{paths.model_dir}/{s}").exists]
    assert not missing, f"shards named in the index but missing: {missing}"


def test_config_holds_the_text_only_edit(host, data, paths):
    method = data.get("vllm_text_only_method")
    config = json.loads(host.file(paths.model_config).content_string)
    kept = host.file(paths.model_config_original)
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


def test_vllm_serves_it_text_only(host, data, paths):
    """vLLM 0.22.1's own config code, run as the service user, must see a text-only model."""
    python = f"{paths.vllm_venv}/bin/python"
    method = data.get("vllm_text_only_method")
    out = host.run(
        f"runuser -u {data.get('vllm_user')} -- env HOME={paths.vllm_home} HF_HUB_OFFLINE=1 "
        f"{python} {paths.vllm_scripts}/text_only_check.py {paths.model_dir} --method {method}"
    )
    assert out.rc == 0, (
        f"vLLM would not serve {paths.model_dir} text-only: {out.stdout}{out.stderr[-600:]}"
    )
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert verdict["text_only"] is True, f"vLLM's verdict: {verdict.get('reasons')}"
