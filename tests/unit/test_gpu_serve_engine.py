"""benchmarks/gpu-serve's engine: rigup's arguments and environment as roles/vllm/flags.py renders
them (the same code the unit uses, importable without pyinfra), this run's overrides, the
NVLink-multicast variables always, bad overrides named all at once."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_SERVE = REPO / "benchmarks" / "gpu-serve"
sys.path.insert(0, str(GPU_SERVE))

from gpuserve import engine, rigup  # noqa: E402

from roles.vllm.flags import serve_args, service_env  # noqa: E402
from tests.conftest import load_group_data  # noqa: E402

#: the two-GPU lending machine (nvidia-smi's memory.total in MiB); ONE_H200: the one-GPU one
H200 = [engine.Gpu(0, "NVIDIA H200", 143771), engine.Gpu(1, "NVIDIA H200", 143771)]
ONE_H200 = H200[:1]


@pytest.fixture
def model(tmp_path) -> str:
    (tmp_path / "config.json").write_text("{}")
    return str(tmp_path)


def render(model: str, gpus=H200, **kw) -> engine.Rendered:
    o = engine.Overrides(model=model, **kw)
    return engine.render(rigup.settings(), o, gpus, "/srv/home", {})


def test_settings_are_the_deploys_settings():
    """inventory/group_data/all.py read without pyinfra gives what the deploy reads."""
    assert rigup.settings() == load_group_data()


def test_unchanged_settings_render_the_units_arguments(model):
    r = render(model)
    data = rigup.settings()
    assert r.argv[1:3] == [str(engine.VLLM_CLI), "serve"]
    assert r.argv[3:] == serve_args(data, model)
    env = service_env({**data, "vllm_env": engine.NVLS_OFF}, "/srv/home", {})
    assert r.env == env


def test_overrides(model):
    r = render(model, tensor_parallel_size=1, max_model_len=59200, memory_gib=24, mtp=False)
    args = r.argv[3:]
    assert args[args.index("--tensor-parallel-size") + 1] == "1"
    assert args[args.index("--max-model-len") + 1] == "59200"
    # 24 GiB of the card's 143771 MiB (140.4 GiB)
    assert r.gpu_memory_utilization == round(24 / (143771 / 1024), 4) == 0.1709
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.1709"
    assert "--speculative-config" not in args


def test_nvlink_multicast_is_off_in_every_engine_environment(model):
    for kw in ({}, {"as_3090": True}, {"mtp": False, "enforce_eager": True}):
        env = render(model, **kw).env
        assert {k: env[k] for k in engine.NVLS_OFF} == engine.NVLS_OFF


def test_as_3090_takes_the_3090s_kernel_paths_only_when_asked(model):
    plain, as_3090 = render(model), render(model, as_3090=True, enforce_eager=True)
    assert "VLLM_DISABLED_KERNELS" not in plain.env
    assert "--gdn-prefill-backend" not in plain.argv and "--enforce-eager" not in plain.argv
    assert as_3090.env["VLLM_DISABLED_KERNELS"] == "MacheteLinearKernel"
    assert as_3090.argv[-3:] == ["--enforce-eager", "--gdn-prefill-backend", "triton"]


def test_bad_overrides_are_named_all_at_once(tmp_path):
    with pytest.raises(ValueError) as err:
        render(str(tmp_path / "none"), ONE_H200, tensor_parallel_size=2, max_model_len=8,
               memory_gib=200)  # fmt: skip
    text = str(err.value)
    for part in ("has no config.json", "tensor parallel size 2: this machine has 1 GPU",
                 "max model len 8", "memory budget 200 GiB: each GPU has 140.40 GiB"):  # fmt: skip
        assert part in text, text
    with pytest.raises(ValueError, match="no GPU answered"):
        render(str(tmp_path / "none"), gpus=[], memory_gib=24)
    # the settings' own tensor parallel size (2) is checked too
    with pytest.raises(ValueError, match="tensor parallel size 2: this machine has 1 GPU"):
        render(str(tmp_path / "none"), ONE_H200)


def test_gpu_rows_parse():
    text = "0, NVIDIA H200, 143771\n1, NVIDIA GeForce RTX 3090, 24576\nNo devices were found\n"
    assert engine.parse_gpus(text) == [
        engine.Gpu(0, "NVIDIA H200", 143771),
        engine.Gpu(1, "NVIDIA GeForce RTX 3090", 24576),
    ]


def test_renders_without_pyinfra(model, tmp_path):
    """On the GPU machine there is no pyinfra: the rendering imports none (a Python without it,
    the same argv as here)."""
    code = (
        "import json, sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] == 'pyinfra': raise ModuleNotFoundError('no pyinfra here', name='pyinfra')\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        f"sys.path.insert(0, {str(GPU_SERVE)!r})\n"
        "from gpuserve import engine, rigup\n"
        f"o = engine.Overrides(model={model!r}, max_model_len=4096)\n"
        "r = engine.render(rigup.settings(), o, [], '/srv/home', {})\n"
        "print(json.dumps([r.argv[3:], r.env]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    argv, env = json.loads(out.stdout)
    here = render(model, gpus=[], max_model_len=4096)
    assert argv == here.argv[3:] and env == here.env


def test_the_host_package_imports_as_on_a_rig(tmp_path):
    lib = rigup.host_package(tmp_path / "lib")
    assert sorted(p.name for p in lib.iterdir()) == ["rigup"]
    code = (
        f"import sys; sys.path.insert(0, {str(lib)!r}); from rigup import bench; "
        "print(bench.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd="/"
    )
    assert out.stdout.strip() == str(lib / "rigup" / "bench" / "__init__.py"), out.stderr


def _record(model: str, **kw) -> dict:
    r = render(model, **kw)
    return engine.record_of(r, 4242, {"overrides": {"model": model, **kw}, "machine": {
        "gpus": engine.asdict_gpus(ONE_H200)}})  # fmt: skip


def test_the_record_leaves_out_secret_values(model):
    o = engine.Overrides(model=model)
    data = {**rigup.settings(), "vllm_env": {"HF_TOKEN": "hf_secret", "MY_API_KEY": "k1"}}
    r = engine.render(data, o, H200, "/srv/home", {})
    assert r.env["HF_TOKEN"] == "hf_secret"  # the engine gets it
    rec = engine.record_of(r, 1, {})
    assert rec["env"]["HF_TOKEN"] == rec["env"]["MY_API_KEY"] == "(not recorded)"
    assert "hf_secret" not in json.dumps(rec)


def test_bench_config_is_what_rigup_bench_reads(model, tmp_path):
    """rigup-bench's own code (as the rig's host package) plans the rows and builds vLLM's
    benchmark command line from the engine's record."""
    from gpuserve import steps

    record = _record(model, tensor_parallel_size=1, max_model_len=59200, memory_gib=24)
    cfg = steps.bench_config(record, tmp_path)
    rigup.host_package(tmp_path / "lib")
    from rigup import bench

    plan = bench.plan(cfg, None, None, 1.0, False)
    assert [r["id"] for r in plan.rows] == [r["id"] for r in rigup.settings()["bench_rows"]]
    s = bench.shape(plan.rows[0], cfg["vllm"]["max_model_len"])
    argv = bench.bench_argv(
        cfg, s, seed=1, salt="s", result_dir=str(tmp_path), filename="r.json", label="x"
    )
    assert argv[:4] == [sys.executable, str(engine.VLLM_CLI), "bench", "serve"]
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:8000"
    assert argv[argv.index("--tokenizer") + 1] == model
    assert cfg["vllm"]["kv_cache_dtype"] == "fp8_e5m2"
    assert cfg["vllm"]["tensor_parallel_size"] == 1
    assert cfg["gpus"]["count"] == 1


FIX = REPO / "tests" / "fixtures"


@pytest.mark.parametrize(
    ("nvlink", "env", "args"),
    [
        ("rtx3090/nvlink-s-healthy.txt", {"NCCL_P2P_LEVEL": "NVL"}, []),
        (
            "rtx3090/nvlink-s-one-link-inactive.txt",
            {"NCCL_P2P_DISABLE": "1"},
            ["--disable-custom-all-reduce"],
        ),
        (
            "rtx3090/nvlink-s-empty-no-bridge.txt",
            {"NCCL_P2P_DISABLE": "1"},
            ["--disable-custom-all-reduce"],
        ),
    ],  # fmt: skip
)
def test_interconnect_is_rigup_nvlinks_verdict(tmp_path, monkeypatch, model, nvlink, env, args):
    """rigup-nvlink itself runs (nvidia-smi replaying captured 3090 answers): a verified bridge
    gives NCCL_P2P_LEVEL=NVL, a degraded one P2P off and --disable-custom-all-reduce, after the
    unit's arguments as $RIGUP_VLLM_INTERCONNECT_ARGS puts them."""
    from tests.unit.test_nvidia_role import RECORDED_SMI, _query

    smi = tmp_path / "nvidia-smi"
    smi.write_text(RECORDED_SMI)
    smi.chmod(0o755)
    answers = {
        "query": _query((290, 290)),
        "nvlink": (FIX / nvlink).read_text(),
        "topo": (FIX / "rtx3090/topo-m-nv4.txt").read_text(),
        "p2p": (FIX / "rtx3090/topo-p2p-r-ok.txt").read_text(),
    }
    for name, text in answers.items():
        (tmp_path / name).write_text(text)
    state = tmp_path / "state.txt"
    state.write_text("")
    monkeypatch.setenv("RIGUP_NVIDIA_SMI", str(smi))
    monkeypatch.setenv("RIGUP_DRIVER_STATE_COMMAND", f"cat {state}")
    monkeypatch.setenv("SMI_DIR", str(tmp_path))
    monkeypatch.setenv("SMI_LOG", str(tmp_path / "calls.log"))
    link = engine.interconnect(tmp_path / "work", 2, 4, rigup.host_package(tmp_path / "lib"))
    assert link["exit"] == 0, link["report"]
    assert (link["env"], link["args"]) == (env, args)
    if not answers["nvlink"]:  # driver 580 without a bridge (canonical/checkbox#2617)
        assert "no NVLink links reported at all: no bridge detected" in link["report"]
        assert "driver sees every GPU" not in link["report"]
    o = engine.Overrides(
        model=model,
        interconnect_env=tuple(link["env"].items()),
        interconnect_args=tuple(link["args"]),
    )
    r = engine.render(rigup.settings(), o, H200, "/h", {})
    assert {k: r.env[k] for k in env} == env
    assert r.argv[len(r.argv) - len(args) :] == args
    assert r.argv[3 : len(r.argv) - len(args)] == serve_args(rigup.settings(), model)


def test_the_bench_is_labelled_with_the_machine():
    from gpuserve import steps

    m = {"gpu": "NVIDIA H200", "gpu_count": 1, "tensor_parallel_size": 1, "mtp": False,
         "memory_gib": 24.0}  # fmt: skip
    assert steps.machine_line(m) == (
        "machine: 1 x NVIDIA H200, tensor parallel 1, MTP off, 24 GiB a GPU"
    )


def test_kv_prediction_beside_vllms_figures(tmp_path):
    """Every run's summary puts roles/vllm/kv_budget.py's figures beside vLLM's: here the H200
    tiny run (its 4-layer, one-key-head checkpoint) and the full-size run's refusal of 262144 tokens."""
    from gpuserve import steps

    from lab.checkpoint import config_json as real_config
    from lab.tiny.shape import TINY, config_json
    from lab.tiny.tokenizer import build_tokenizer
    from rigup.diagnosis.engine_start import engine_start_facts

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    # the shape of that run: GDN key = value head dim 64, 4 value heads (lab/tiny ships 32 since)
    shape = dataclasses.replace(
        TINY, lin_k_heads=1, lin_v_heads=4, lin_k_dim=64, lin_v_dim=64, num_layers=4
    )
    (tiny / "config.json").write_text(
        json.dumps(config_json(build_tokenizer(), "hybrid-int4", shape))
    )
    log = FIX / "vllm-cuda" / "serve-tiny-int4-cudagraphs.log"
    facts = engine_start_facts(log.read_text()).as_dict()
    p = steps.kv_prediction(_record(str(tiny), tensor_parallel_size=1, max_model_len=4096), facts)
    assert p["block_size"] == p["block_size_vllm"] == 288
    assert p["pool_tokens"] == pytest.approx(p["pool_tokens_vllm"], rel=3e-4)

    full = tmp_path / "full"
    full.mkdir()
    (full / "config.json").write_text(json.dumps(real_config()))
    refusal = engine_start_facts(
        "max seq len (262144), (9.13 GiB KV cache is needed, which is larger than the available "
        "KV cache memory (2.57 GiB). Based on the available memory, the estimated maximum model "
        "length is 59200. Try"
    ).as_dict()
    p = steps.kv_prediction(
        _record(str(full), tensor_parallel_size=1, max_model_len=262144), refusal
    )
    assert p["needed_gib"] == p["needed_gib_vllm"] == 9.13
    assert p["estimated_max_model_len"] == p["estimated_max_model_len_vllm"] == 59200
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps(config_json(build_tokenizer(), "dense")))
    got = steps.kv_prediction(_record(str(dense), tensor_parallel_size=1), facts)
    assert got["error"].startswith("KeyError")  # no gated delta net: no hybrid layout


def test_stop_ends_the_whole_process_group():
    """The engine runs in its own session (API server, engine core, workers): stop waits until
    none is left, and kills what ignores SIGTERM."""
    import subprocess as sp

    polite = sp.Popen(["sh", "-c", "sleep 300 & sleep 300"], start_new_session=True)
    assert engine.group_alive(polite.pid)
    assert engine.stop({"pid": polite.pid}, grace_s=10) == "stopped (SIGTERM)"
    assert not engine.group_alive(polite.pid)
    stubborn = sp.Popen(["sh", "-c", "trap '' TERM; sleep 300"], start_new_session=True)
    time.sleep(0.3)  # the trap is set
    assert engine.stop({"pid": stubborn.pid}, grace_s=1) == "killed (SIGKILL after 1 s)"
    assert not engine.group_alive(stubborn.pid)
    assert engine.stop({"pid": stubborn.pid}) == "not running"
