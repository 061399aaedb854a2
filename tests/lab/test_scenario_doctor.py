"""The lab scenario, rigup-doctor, rigup-bench and rigup-report (roles/doctor) against the
serving lab."""

from __future__ import annotations

import json
import time

from lab import serving
from tests.lab.labtools import (
    LAB_MARKS,
    active,
    doctor,
    main_pid,
    problems,
    pyinfra,
    verdict_ids,
    wait_up,
)

pytestmark = LAB_MARKS


# --- rigup-doctor, rigup-bench, rigup-report (roles/doctor) on the serving lab ------------------
BENCH_DIR = "/var/lib/rigup/bench"
ARM = "prefill-cap-512"  # inventory/lab.py: an arm the CPU build can run (a changed ExecStart)


def _records(lab) -> list[str]:
    return lab.ssh(f"ls {BENCH_DIR}", check=False).stdout.split()


def _exec_start(lab) -> str:
    return lab.ssh("systemctl show -p ExecStart --value vllm.service").stdout.split(" ; ")[1]


def test_bench_refuses_outside_the_llm_mode_starting_nothing(converged):
    lab = converged
    lab.ssh("rigup-mode media")
    before = _records(lab)
    p = lab.ssh("rigup-bench", check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "the rig is in the media mode" in p.stderr and "sudo rigup-mode llm" in p.stderr
    assert "Nothing was started" in p.stderr
    assert active(lab, "vllm.service") == "inactive" and _records(lab) == before


def test_doctor_is_green_on_the_healthy_lab_in_both_modes(converged):
    """rigup-doctor on the healthy lab: exit 0 in the media mode (vLLM stopped by design) and in
    the LLM mode, where it reads vLLM's /metrics and explains the 0 % prefix-cache hit rate."""
    lab = converged
    lab.ssh("rigup-mode media")
    code, result, seconds = doctor(lab)
    assert code == 0, problems(result)
    assert "service/other-mode" in verdict_ids(result, "services") and "gpus-none" in verdict_ids(
        result
    )
    print(f"\nrigup-doctor, media mode: ok in {seconds:.1f} s")
    lab.ssh("rigup-mode llm")
    lab.ssh(
        f"curl -fsS -o /dev/null http://127.0.0.1:{serving.lab_vllm_port(lab.cfg)}/v1/completions "
        "-H 'Content-Type: application/json' "
        '-d \'{"model": "qwen3.6-27b", "prompt": "Hello", "max_tokens": 4}\''
    )
    code, result, seconds = doctor(lab)
    assert code == 0, problems(result)
    metrics = {
        v["id"]: v
        for v in next(s for s in result["sections"] if s["name"] == "metrics")["verdicts"]
    }
    assert "prefix-cache/off" in metrics, metrics
    assert "vllm#48375" in metrics["prefix-cache/off"]["why"]
    assert {"service/up", "venv/ok", "disk/ok"} <= set(verdict_ids(result)), verdict_ids(result)
    print(f"rigup-doctor, LLM mode: ok in {seconds:.1f} s; {metrics['prefix-cache/off']['what']}")


def test_bench_every_row_self_test_and_an_arm_against_the_cpu_engine(converged):
    """rigup-bench in the LLM mode: every row with vLLM's own `vllm bench serve` (lengths scaled
    down for the CPU), the prefix-cache self-test, and one A/B arm through the drop-in, then the
    configured service restored and verified. The figures are printed, not judged."""
    lab = converged
    lab.ssh("rigup-mode llm")
    before = _exec_start(lab)
    started = time.monotonic()
    p = lab.ssh(f"rigup-bench --scale 0.02 --arms {ARM}", check=False, timeout=3600)
    seconds = time.monotonic() - started
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    record = json.loads(lab.ssh("rigup-bench --last --json").stdout)
    assert record["path"].startswith(f"{BENCH_DIR}/") and record["engine"] == "CPU"
    configured, arm = record["arms"]
    rows = lab.ssh(
        'python3 -c \'import json; print(json.dumps([r["id"] for r in json.load(open("/etc/rigup/doctor/doctor.json"))["bench"]["rows"]]))\''
    ).stdout
    assert [r["id"] for r in configured["rows"]] == json.loads(rows)
    for r in configured["rows"] + arm["rows"]:
        assert r["value"] and r["value"] > 0, r
        assert r["result"]["completed"] == r["prompts"] and r["result"]["failed"] == 0, r
    cold = next(r for r in configured["rows"] if r["figure"] == "cold-ttft")
    assert cold["cold"] is True and cold["prefix_cache"]["hits"] == 0
    st = record["self_test"]
    assert st["status"] == "off" and st["passed"] and st["verdict"]["id"] == "prefix-cache/off"
    assert (arm["name"], [r["id"] for r in arm["rows"]]) == (ARM, ["prefill-2k"])
    assert record["restored"]["ok"], record["restored"]
    assert (
        not lab.ssh(
            "test -e /run/systemd/system/vllm.service.d/50-rigup-bench-arm.conf", check=False
        ).returncode
        == 0
    )
    assert _exec_start(lab) == before and active(lab, "vllm.service") == "active"
    table = lab.ssh("rigup-bench --last").stdout
    print(f"\nrigup-bench on the lab ({seconds:.0f} s):\n{table}")
    assert "on the CPU (CPU engine with a tiny test model" in table
    assert table.count("| decode, 1 user (MTP 3) | 128.2 tok/s |") == 1


def test_an_interrupted_arm_restores_the_configured_service(converged):
    """SIGTERM while an arm's engine starts (its drop-in in place, vllm.service restarting with
    it: the long wait a user interrupts): rigup-bench removes its drop-in, restarts the
    configured vllm.service and verifies it before exiting; the record says so."""
    lab = converged
    lab.ssh("rigup-mode llm")
    before = _exec_start(lab)
    lab.ssh(
        f"nohup rigup-bench --arms {ARM} --rows decode-1 --no-self-test --scale 0.02 "
        "> /root/bench-interrupted.log 2>&1 & echo $! > /root/bench.pid"
    )
    lab.ssh(
        "for i in $(seq 600); do systemctl show -p ExecStart --value vllm.service | "
        "grep -q -- '--long-prefill-token-threshold 512' && exit 0; sleep 1; done; exit 1",
        timeout=700,
    )
    lab.ssh("kill -TERM $(cat /root/bench.pid)")
    lab.ssh("while kill -0 $(cat /root/bench.pid) 2>/dev/null; do sleep 2; done", timeout=900)
    log = lab.ssh("cat /root/bench-interrupted.log").stdout
    assert "interrupted (SIGTERM)" in log and "restoring the configured vllm.service" in log, log
    record = json.loads(lab.ssh("rigup-bench --last --json").stdout)
    assert record["interrupted"] == "SIGTERM" and record["restored"]["ok"], record["restored"]
    assert _exec_start(lab) == before and active(lab, "vllm.service") == "active"
    assert lab.ssh("rigup-doctor --only services", check=False).returncode == 0


def test_report_renders_the_post_in_both_languages(converged):
    lab = converged
    post = lab.ssh("rigup-report", timeout=300).stdout
    assert "## My local-AI rig (set up with rigup)" in post and "## 我的本地 AI 主机" in post
    assert "no NVIDIA GPU (vLLM runs on the CPU)" in post and "vLLM 0.22.1 (CPU build" in post
    assert "| decode, 1 user (MTP 3) | 128.2 tok/s |" in post
    assert "| 解码，1 个用户（MTP 3） | 128.2 tok/s |" in post
    hostname = lab.ssh("hostname").stdout.strip()
    assert hostname and hostname not in post, "the host name is not redacted"
    for address in lab.ssh("hostname -I", check=False).stdout.split():
        assert address not in post, f"{address} is not redacted"
    print("\n" + post[:1500])


#: a deliberately broken unit: (how, the verdicts rigup-doctor must give, whether it fails only
#: at a request)
DOCTOR_BREAKS = {
    "engine refused for memory": (
        "sed -i 's/--gpu-memory-utilization 0.05/--gpu-memory-utilization 0.99/' "
        "/etc/systemd/system/vllm.service",
        {"vllm-memory-below-request"},
        False,
    ),
    "wrong kv-cache dtype": (
        "sed -i 's/--max-model-len /--kv-cache-dtype fp8_e4m3 --max-model-len /' "
        "/etc/systemd/system/vllm.service",
        {"vllm-kv-dtype/cpu"},
        True,
    ),
}


def test_doctor_names_the_fault_of_each_broken_unit(converged):
    """The unit edited by hand and restarted, one fault after the other (vLLM refused for
    memory; an FP8 KV cache the CPU engine runs into at its first request): rigup-doctor exits 2
    naming the service's state and the journal's cause with its fix. The unit is put back."""
    lab = converged
    lab.ssh("rigup-mode llm && cp /etc/systemd/system/vllm.service /root/vllm.service.good")
    port = serving.lab_vllm_port(lab.cfg)
    request = (
        f"timeout 90 curl -s -o /dev/null http://127.0.0.1:{port}/v1/completions -H "
        "'Content-Type: application/json' -d "
        '\'{"model": "qwen3.6-27b", "prompt": "Hello", "max_tokens": 4}\''
    )
    try:
        for what, (command, expected, at_request) in DOCTOR_BREAKS.items():
            lab.ssh(
                f"cp /root/vllm.service.good /etc/systemd/system/vllm.service && {command} && "
                "systemctl daemon-reload && systemctl restart --no-block vllm.service"
            )
            found: list[str] = []
            started = time.monotonic()
            while time.monotonic() - started < 600:
                if at_request:
                    lab.ssh(request, check=False, timeout=150)
                code, result, _ = doctor(lab, "services")
                found = verdict_ids(result, "services")
                if expected <= set(found):
                    break
                time.sleep(5)
            assert code == 2 and expected <= set(found), (what, found, problems(result))
            print(f"\n{what}: " + " | ".join(p for p in problems(result) if "vllm" in p.lower()))
    finally:  # the unit put back and serving again: the media and modes modules follow on this lab
        lab.ssh(
            "cp /root/vllm.service.good /etc/systemd/system/vllm.service && "
            "systemctl daemon-reload && systemctl restart --no-block vllm.service",
            check=False,
        )
        assert wait_up(lab, "vllm.service", 600) == "active/running", "vLLM did not serve again"


#: vLLM's TMPDIR (roles/vllm/flags.py), where torch.compile's C++ precompiled header goes
VLLM_TMP = "/var/lib/rigup/vllm/tmp"
#: a file system of the lab machine's own, never the disk it shares with its host: 64 MiB,
#: below the 134 MiB header (a cold start in the lab) and the 2 GiB a start needs
SMALL_TMPFS = (
    f"mount -t tmpfs -o size=64m,mode=700,uid=$(id -u vllm),gid=$(id -g vllm) "
    f"rigup-lab-small {VLLM_TMP}"
)


def test_a_full_disk_refuses_the_restart_before_any_change_and_the_doctor_names_enospc(
    converged,
):
    """On a 64 MiB tmpfs over vLLM's TMPDIR inside the lab machine: a converge
    with a pending change to the serving vllm.service stops before any change naming the path and
    free vs needed GiB (vLLM keeps serving, its unit untouched); a restart onto it dies in
    torch's C++ compile with ENOSPC, and rigup-doctor names ENOSPC first, never the routine
    ulimit warning."""
    lab = converged
    started = time.monotonic()
    lab.ssh("rigup-mode llm")  # serving already after the tests above; alone, a cold start
    assert active(lab, "vllm.service") == "active"
    print(f"\nLLM mode up in {time.monotonic() - started:.1f} s")
    stamp = "stat -c %Y /etc/systemd/system/vllm.service /etc/rigup/vllm/vllm.env"
    before, pid = lab.ssh(stamp).stdout, main_pid(lab, "vllm.service")
    lab.ssh(SMALL_TMPFS)
    try:
        started = time.monotonic()
        proc = pyinfra("-y", "inventory/lab.py", "deploys/vllm.py", "--data", "vllm_max_num_seqs=7")
        refused_s = time.monotonic() - started
        out = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode != 0, out[-3000:]
        assert "not enough free space to restart vllm.service" in out, out[-3000:]
        assert f"{VLLM_TMP} (file system {VLLM_TMP}): 0.06 GiB free of 0.06 GiB, 2 GiB" in out
        assert "Beginning operation run" not in out and "(nothing was changed)" in out
        assert lab.ssh(stamp).stdout == before and main_pid(lab, "vllm.service") == pid
        print(f"refused in {refused_s:.1f} s")

        lab.ssh("systemctl restart --no-block vllm.service")
        found: list[str] = []
        code, result = 0, {}
        while time.monotonic() - started < 420:
            time.sleep(10)
            code, result, _ = doctor(lab, "services")
            found = verdict_ids(result, "services")
            if "no-space" in found:
                break
        assert code == 2 and "no-space" in found, (found, problems(result))
        services = next(s for s in result["sections"] if s["name"] == "services")
        first = next(v for v in services["verdicts"] if v["severity"] == "fail")
        assert first["id"] == "no-space", services["verdicts"]
        assert f"writing {VLLM_TMP}/torchinductor_vllm/precompiled_headers/" in first["what"]
        assert f"its file system {VLLM_TMP}:" in first["what"]
        assert not any("Errno 24" in p for p in problems(result)), problems(result)
        print(f"doctor named ENOSPC {time.monotonic() - started:.1f} s in: {first['what']}")
    finally:  # the lab's own disk back under vLLM, which starts again without a wait: the media
        # module next switches to the media mode (rigup-mode stops a starting vLLM at once)
        lab.ssh(
            f"systemctl stop vllm.service; umount {VLLM_TMP}; "
            "systemctl start --no-block vllm.service",
            check=False,
        )
