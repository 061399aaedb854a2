"""The lab scenario, models: from the lab's Hugging Face-compatible server through
huggingface_hub, locked on first placement; bytes per run, resume after a kill, integrity and
repair, the token, backup and restore, a rebuild with no network."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time

import pytest

from lab import hub_lab, offline, scenario
from tests.lab.labtools import (
    LAB_MARKS,
    infra,
)

pytestmark = LAB_MARKS


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


#: on the lab: the lab hub is frozen with a verified shard and the transfer still running
FROZEN = "/run/rigup-test-hub-frozen"
#: on the lab: the pid of the shell that freezes the hub
FREEZER = "/run/rigup-test-hub-freezer.pid"


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
    # On the host, before the run starts: once the first shard is verified, the lab hub is
    # frozen (SIGSTOP) within 20 ms, so the transfer is certain to be running when the
    # controller is killed (the rest, 500 MiB, cannot arrive in that time); FROZEN says so.
    converged.ssh(
        f"rm -f {FROZEN}; nohup sh -c 'until grep -qs safetensors {verified}; do sleep 0.02; "
        f"done; systemctl kill -s STOP {hub_lab.HUB_UNIT} && touch {FROZEN}' "
        f">/dev/null 2>&1 & echo $! > {FREEZER}"
    )
    try:
        run = subprocess.Popen(
            [str(scenario.BIN / "pyinfra"), "-y", "inventory/lab.py", "deploys/model.py",
             "--data", data],
            cwd=scenario.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while converged.ssh(f"test -e {FROZEN}", check=False).returncode != 0:
            assert run.poll() is None, "the first run ended before it could be killed"
            assert time.monotonic() < deadline, "no file verified within 300 s"
            time.sleep(0.3)
        # the hub is frozen: the transfer cannot end by itself, so the kill lands inside it
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 30
        while converged.ssh("pgrep -f 'model_fetch[.]py place'", check=False).returncode == 0:
            assert time.monotonic() < deadline, "the transfer outlived its controller by 30 s"
            time.sleep(0.5)
        converged.ssh(f"systemctl kill -s CONT {hub_lab.HUB_UNIT}; rm -f {FROZEN}")
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
    finally:  # the hub thawed and the freezer gone whatever happened
        converged.ssh(
            f"kill $(cat {FREEZER}) 2>/dev/null; rm -f {FREEZER} {FROZEN}; "
            f"systemctl kill -s CONT {hub_lab.HUB_UNIT}",
            check=False,
        )
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
    broken = infra("-k", "verifies_byte_for_byte")
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
    assert infra("-k", "byte_for_byte or matches_its_manifest").ok
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
    assert infra("-k", "test_model and not vllm_serves").ok


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
        assert infra("-k", "byte_for_byte or matches_its_manifest or venv").ok
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
