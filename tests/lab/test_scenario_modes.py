"""The lab scenario, GPU modes: rigup-mode with real systemd and vLLM's CPU build serving,
restarts and crash loops, the VRAM budget, ComfyUI (user files, by-hand changes, FLUX.2 files,
a release locked by its first run)."""

from __future__ import annotations

import http.client
import json
import shlex
import socket
import subprocess
import time

import pytest

from lab import comfyui_lab, scenario, serving
from roles.vllm.settings import DEV_MODE_ROUTES
from tests.lab.labtools import (
    LAB_MARKS,
    active,
    doctor,
    infra,
    main_pid,
    pyinfra,
    verdict_ids,
    wait_up,
)

pytestmark = LAB_MARKS


# --- GPU modes, VRAM budget and ComfyUI -------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def fully_converged(converged):
    """A full converge first: earlier modules place models again with deploys/model.py alone,
    which leaves vLLM's checks of the placed model to the next full converge; the tests here
    expect a converged lab (0 changes planned while vLLM serves)."""
    result = scenario.converge()
    assert result.ok, f"converge failed (exit {result.rc}); its output is above"
    return converged


def test_mode_switch_with_real_systemd_and_vllm_serving(media):
    """rigup-mode switches the conflicting targets for real: the old mode's services stop first,
    the new mode's enabled services start and answer their readiness check. In the LLM mode
    vllm.service (the CPU build) serves: `rigup-mode llm` returns once /health answers, and the
    OpenAI API answers (testinfra, test_vllm_serving.py, roles/vllm/api_checks.py)."""
    lab = media
    assert active(lab, "rigup-media.target") == "active"
    assert active(lab, "vllm.service") == "inactive", "vLLM must not run in the media mode"
    assert active(lab, "comfyui.service") == "active"
    step = serving.serve(lab)
    assert step.ok, step.detail.get("stderr")
    print(
        f"\nrigup-mode llm: /health after {step.detail['health_s']:.0f} s; first token "
        f"{step.detail['ttft_s']:.2f} s; engine RSS {step.detail['rss_mib']:.0f} MiB; "
        f"answer {step.detail['answer'][:80]!r}"
    )
    assert active(lab, "rigup-llm.target") == "active"
    assert active(lab, "rigup-media.target") == "inactive"
    assert active(lab, "vllm.service") == "active"
    assert active(lab, "voxcpm.service") == "inactive", "PartOf= did not stop VoxCPM2"
    # the whole suite, as a user runs it in this mode: every check passes or skips with its
    # reason, and none of vLLM's serving checks is skipped for the mode
    served = infra("-rs")
    assert served.ok, served.detail["output"]
    assert "vllm.service serves in the llm mode" not in served.detail["output"], served.detail[
        "output"
    ]
    assert (
        "voxcpm.service serves in the media mode and this host is in the llm mode"
        in (served.detail["output"])
    ), served.detail["output"]
    # A deploy keeps the mode the user switched to, with vLLM running: 0 changes planned.
    result = scenario.idempotence()
    assert result.rc == 0, result.detail.get("stderr") or result.detail["changes"]
    lab.ssh("rigup-mode media")
    assert active(lab, "rigup-media.target") == "active"
    assert active(lab, "rigup-llm.target") == "inactive"
    assert active(lab, "vllm.service") == "inactive", "PartOf= did not stop vLLM"
    assert active(lab, "voxcpm.service") == "active"
    # rigup-mode returns once ComfyUI's ExecStartPost saw GET /system_stats answer
    assert active(lab, "comfyui.service") == "active"
    port = comfyui_lab.lab_comfyui_port(lab.cfg)
    stats = json.loads(lab.ssh(f"curl -fsS http://127.0.0.1:{port}/system_stats").stdout)
    assert stats["devices"][0]["type"] == "cpu"
    assert stats["system"]["comfyui_version"] == "0.30.0", stats["system"]


def test_a_killed_engine_is_restarted_by_systemd(converged):
    """kill -9 of the serving engine: systemd restarts it (Restart=), and it serves again."""
    lab = converged
    lab.ssh("rigup-mode llm")
    before = main_pid(lab, "vllm.service")
    lab.ssh(f"kill -9 {before}")
    state = wait_up(lab, "vllm.service", 600)
    assert state == "active/running", f"vllm.service after kill -9: {state}"
    assert main_pid(lab, "vllm.service") not in (0, before)
    assert "1" == lab.ssh("systemctl show -p NRestarts --value vllm.service").stdout.strip()
    assert infra("tests/infra/test_vllm_serving.py", "-k", "chat_completion").ok


def _global_ipv4() -> str:
    """This controller's first non-loopback IPv4 address (the lab shares its network)."""
    out = subprocess.run(
        ["ip", "-j", "-4", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    addresses = [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])]
    assert addresses, "this controller has no non-loopback IPv4 address to probe from"
    return addresses[0]


def _probe(address: str, port: int, method: str, path: str, key: str | None) -> str:
    """``"refused"``, or the HTTP status a request got (the route answered)."""
    conn = http.client.HTTPConnection(address, port, timeout=10)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        conn.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
        return str(conn.getresponse().status)
    except ConnectionRefusedError:
        return "refused"
    finally:
        conn.close()


def test_vllm_dev_mode_routes_answer_on_loopback_only(converged):
    """The lab runs vLLM with vllm_server_dev_mode (inventory/lab.py): the running engine has
    VLLM_SERVER_DEV_MODE=1 and its dev-mode routes (roles/vllm/settings.py DEV_MODE_ROUTES,
    each listed by its own /openapi.json) answer on loopback; on the machine's non-loopback
    address not one of them answers, with the key or without, while a listener bound there
    answers (the address is reachable: the refusal is vLLM's bind, not the network)."""
    lab = converged
    lab.ssh("rigup-mode llm")  # up already after the test above: no restart
    port = serving.lab_vllm_port(lab.cfg)
    environ = lab.ssh(f"tr '\\0' '\\n' < /proc/{main_pid(lab, 'vllm.service')}/environ").stdout
    assert "VLLM_SERVER_DEV_MODE=1" in environ.splitlines()
    listed = json.loads(lab.ssh(f"curl -fsS http://127.0.0.1:{port}/openapi.json").stdout)
    missing = [p for _, p in DEV_MODE_ROUTES if p not in listed["paths"]]
    assert not missing, f"dev-mode routes the running vLLM does not serve: {missing}"
    loopback = lab.ssh(f"curl -sS -o /dev/null -w '%{{http_code}}' 127.0.0.1:{port}/is_sleeping")
    assert loopback.stdout == "200", "the dev routes do not answer on loopback: nothing proven"
    address = _global_ipv4()
    with socket.create_server((address, 0)) as control:
        with socket.create_connection((address, control.getsockname()[1]), timeout=5):
            pass  # a listener bound to that address is reached
    answered = {
        (method, path, bool(key)): status
        for method, path in DEV_MODE_ROUTES
        for key in (None, "the-wrong-key")
        if (status := _probe(address, port, method, path, key)) != "refused"
    }
    assert not answered, f"dev-mode routes answered on {address}:{port}: {answered}"
    assert _probe(address, port, "GET", "/v1/models", None) == "refused"
    listening = lab.ssh(f"ss -Hltn 'sport = :{port}'").stdout.split()
    assert f"127.0.0.1:{port}" in listening and f"0.0.0.0:{port}" not in listening, listening


def test_an_interrupted_converge_is_finished_by_the_next_run(converged):
    """A converge interrupted after it wrote vllm.service's environment file
    and before it restarted the service leaves vLLM on the old configuration (here the file's
    content is what the next run writes too, so no file of the next run changes). rigup-doctor
    and testinfra report it, the dry plan shows the restart, and the next converge restarts it."""
    lab = converged
    lab.ssh("rigup-mode llm")
    before = main_pid(lab, "vllm.service")
    lab.ssh("sleep 1.1; touch /etc/rigup/vllm/vllm.env")  # written after the engine started
    code, result, _ = doctor(lab, "services")
    assert "service-stale" in verdict_ids(result, "services"), result
    assert not infra("tests/infra/test_modes.py", "-k", "runs_what_is_on_disk").ok
    plan = scenario.idempotence()
    assert "vLLM | Restart vllm.service if running (its inputs changed)" in plan.detail.get(
        "changes", []
    ), plan.detail
    assert scenario.converge().ok
    assert wait_up(lab, "vllm.service", 600) == "active/running"
    assert main_pid(lab, "vllm.service") not in (0, before)
    assert "service-stale" not in verdict_ids(doctor(lab, "services")[1], "services")
    assert scenario.idempotence().rc == 0


def test_a_switch_while_vllm_starts_stops_it_at_once(converged):
    """A mode switch while vLLM is still starting: vLLM 0.22.1's API server does not end on
    SIGTERM before it serves, so systemd's stop waited out TimeoutStopSec= (60 s) and left
    vllm.service `failed`. rigup-mode stops a starting service of the other mode at once (it has
    served nothing) and leaves it inactive, with no failure of its own making on record."""
    lab = converged
    lab.ssh("rigup-mode llm")
    lab.ssh(
        "systemctl restart --no-block vllm.service && for i in $(seq 60); do "
        '[ "$(systemctl show -p SubState --value vllm.service)" = start-post ] && break; '
        "sleep 0.5; done"
    )
    assert active(lab, "vllm.service") == "activating"
    started = time.monotonic()
    out = lab.ssh("rigup-mode media").stdout
    seconds = time.monotonic() - started
    print(
        f"\nrigup-mode media during vLLM's start: {seconds:.1f} s (the media services' start included)"
    )
    assert "vllm.service was still starting (nothing served yet): stopped at once" in out, out
    assert active(lab, "vllm.service") == "inactive"
    assert lab.ssh("systemctl show -p Result --value vllm.service").stdout.strip() == "success"
    assert active(lab, "rigup-media.target") == "active"
    assert active(lab, "voxcpm.service") == "active"


def test_a_crash_loop_fails_the_converge_naming_the_unit(converged):
    """An engine that cannot start (here: vllm_env binds one CPU group where tensor parallel 2
    starts two workers, and vLLM's CPU executor asserts "Given number of CPU id list ['0'] doesn't
    match local world size 2") crash-loops; the converge that restarts it fails, naming the unit and showing its
    journal, instead of reporting success. The next converge with the right settings repairs
    it."""
    lab = converged
    lab.ssh("rigup-mode llm")
    proc = pyinfra(
        "-y", "inventory/lab.py", "deploys/full.py",
        "--data", 'vllm_env={"VLLM_CPU_OMP_THREADS_BIND": "0"}',
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
    code, result, _ = doctor(lab)
    assert code == 2, result
    found = verdict_ids(result, "services")
    assert "service/crash-loop" in found and "vllm-engine-failed" in found, found
    repaired = scenario.converge()
    assert repaired.ok, "the converge with the right settings did not bring vLLM back"
    assert wait_up(lab, "vllm.service", 60) == "active/running"
    lab.ssh("rigup-mode media")


def test_oversubscribed_budget_is_refused_on_the_lab_before_any_change(converged):
    before = converged.ssh("stat -c %Y /etc/systemd/system/rigup-media.target").stdout
    proc = pyinfra(
        "-y",
        "inventory/lab.py",
        "deploys/full.py",
        "--data",
        "comfyui_install=True",
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


def test_user_files_in_comfyui_survive_a_converge(media):
    """Outputs and custom nodes a user made are never touched; a checkout edited by hand stops
    the run with the files named instead of being reset."""
    base = "/srv/rigup/comfyui"
    media.ssh(
        f"runuser -u comfyui -- sh -c 'echo picture > {base}/output/mine.png && "
        f"mkdir -p {base}/custom_nodes/my_node && echo x=1 > {base}/custom_nodes/my_node/a.py'"
    )
    assert scenario.converge().ok
    assert media.ssh(f"cat {base}/output/mine.png").stdout == "picture\n"
    assert media.ssh(f"cat {base}/custom_nodes/my_node/a.py").stdout == "x=1\n"
    media.ssh("echo '# my edit' >> /opt/rigup/comfyui/src/nodes.py")
    try:
        proc = pyinfra("-y", "inventory/lab.py", "deploys/comfyui.py")
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "has local changes" in out and "nodes.py" in out, out
        assert "# my edit" in media.ssh("tail -1 /opt/rigup/comfyui/src/nodes.py").stdout
    finally:
        media.ssh("git -C /opt/rigup/comfyui/src checkout -- nodes.py")


def test_comfyui_highvram_by_hand_fails_clearly_then_converge_repairs_it(media):
    media.ssh(
        "sed -i 's| --cpu| --cpu --highvram|' /etc/systemd/system/comfyui.service && "
        "systemctl daemon-reload"
    )
    test = "test_unit_runs_the_rendered_command_in_the_media_mode"
    broken = infra("-k", test)
    assert broken.rc != 0 and "comfyui.service passes --highvram" in broken.detail["output"]
    assert scenario.converge().ok
    assert infra("-k", test).ok, "converge did not repair the unit"


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


def test_flux2_manifest_placed_and_linked_where_comfyui_lists_it(media):
    """The FLUX.2 Dev manifest through the model machinery: a local copy in the repository's
    layout is verified into the store, each file linked into ComfyUI's folder from the manifest,
    and ComfyUI's own GET /models/<folder> lists it; a second run changes nothing."""
    rels = [f"split_files/{folder}/{name}" for folder, name in FLUX_FILES.items()]
    media.ssh(
        "mkdir -p /srv/mirror/flux2-dev && cd /srv/mirror/flux2-dev && "
        f"python3 -c {shlex.quote(_PLACEHOLDER)} {' '.join(rels)}"
    )
    data = 'comfyui_models=["flux2-dev"]'
    proc = pyinfra("-y", "inventory/lab.py", "deploys/comfyui.py", "--data", data)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    port = comfyui_lab.lab_comfyui_port(media.cfg)
    for folder, name in FLUX_FILES.items():
        link = f"/srv/rigup/comfyui/models/{folder}/{name}"
        target = media.ssh(f"readlink {link}").stdout.strip()
        assert target.startswith("/srv/rigup/models/flux2-dev/"), (link, target)
        listed = json.loads(media.ssh(f"curl -fsS http://127.0.0.1:{port}/models/{folder}").stdout)
        assert name in listed, f"ComfyUI does not list {name} in {folder}: {listed}"
    dry = pyinfra("inventory/lab.py", "deploys/comfyui.py", "--dry", "--json", "--data", data)
    assert dry.returncode == 0, dry.stderr[-2000:]
    plan = json.loads(dry.stdout)["plan"]
    assert not [op["name"] for op in plan if op["hosts_with_change"]]


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
    the locked commit; a lock naming another tree id than the commit's is refused before the
    checkout. The lab's own ComfyUI (0.30.0, the same paths) is stopped and moved
    aside meanwhile, and put back as it was."""
    was = converged.ssh("systemctl is-active comfyui.service", check=False).stdout.strip()
    converged.ssh(
        "systemctl stop comfyui.service && rm -rf /opt/rigup/comfyui.lab && "
        "mv /opt/rigup/comfyui /opt/rigup/comfyui.lab"
    )
    converged.ssh(_TEST_RELEASES)
    repo = "/srv/mirror/comfyui-test.git"
    tagged = converged.ssh(f"git -C {repo} rev-parse 'v1.1^{{commit}}'").stdout.strip()
    # comfyui_commit= : a release without a lock refuses a commit of one's own
    # (roles/comfyui/settings.py); the lab sets none, and this keeps it so
    data = [
        f"comfyui_git_url={repo}",
        "comfyui_release=v1.1",
        f"comfyui_lock_dir={tmp_path}",
        "comfyui_commit=",
    ]
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
        # a lock whose tree id is not the commit's: refused before the checkout, naming both ids
        tree = converged.ssh(f"git -C {repo} rev-parse '{tagged}^{{tree}}'").stdout.strip()
        lock_file = tmp_path / "v1.1.toml"
        lock_file.write_text(lock_file.read_text() + f'tree = "{"0" * 40}"\n')
        converged.ssh("rm -rf /opt/rigup/comfyui")
        refused = pyinfra("-y", "inventory/lab.py", deploy, *args)
        out = refused.stdout + refused.stderr
        assert refused.returncode != 0, out[-4000:]
        assert f"commit {tagged} has tree {tree}, the release lock pins tree {'0' * 40}" in out
        assert converged.ssh("test -e /opt/rigup/comfyui/src", check=False).returncode != 0
    finally:
        converged.ssh(
            f"rm -rf /opt/rigup/comfyui /var/tmp/comfy-test {repo} && "
            "mv /opt/rigup/comfyui.lab /opt/rigup/comfyui"
        )
        if was == "active":
            converged.ssh("systemctl start comfyui.service")
