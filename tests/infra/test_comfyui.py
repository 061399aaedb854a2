"""comfyui role: the pinned checkout, the locked venv, the base directory, the checked flags, the
hardened unit in the media mode, and readiness through GET /system_stats."""

import hashlib
import json
import shlex
from pathlib import Path

import pytest

from roles.comfyui.flags import main_args, service_env, system_stats_url
from roles.comfyui.paths import BASE_SUBDIRS, ComfyuiPaths
from roles.comfyui.release import release_of
from roles.common.facts import uv_env
from roles.modes.budget import MODES

REPO = Path(__file__).resolve().parents[2]
UNIT = "comfyui.service"
TARGET = MODES["media"]


@pytest.fixture(scope="module", autouse=True)
def installed(data):
    if not data.get("comfyui_install"):
        pytest.skip("comfyui_install is False on this host: ComfyUI is not installed")


@pytest.fixture(scope="module")
def d(data) -> ComfyuiPaths:
    return ComfyuiPaths.from_data(data)


def _props(host, unit: str, *names: str) -> dict[str, str]:
    out = host.run(f"systemctl show {unit} " + " ".join(f"-p {n}" for n in names))
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_service_user(host, data, d):
    user = host.user(data.get("comfyui_user"))
    assert user.exists, f"service user {data.get('comfyui_user')} missing: run deploys/comfyui.py"
    assert 0 < user.uid < 1000 and user.home == d.home, (user.uid, user.home)
    assert user.shell in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false"), user.shell


def test_checkout_at_the_pinned_commit_and_clean(host, data, d):
    git = f"git -C {d.src}"
    head = host.run(f"{git} rev-parse HEAD")
    assert head.rc == 0, f"no git checkout at {d.src}: run deploys/comfyui.py"
    release = release_of(data)
    assert head.stdout.strip() == release.commit, (
        f"{d.src} is at {head.stdout.strip()}, release {release.tag} is {release.commit}"
    )
    assert host.run(f"{git} remote get-url origin").stdout.strip() == data.get("comfyui_git_url")
    dirty = host.run(f"{git} status --porcelain").stdout.strip()
    assert not dirty, f"local changes in {d.src}: {dirty}"
    version = host.file(f"{d.src}/comfyui_version.py").content_string
    assert f'__version__ = "{release_of(data).version}"' in version.splitlines()


def test_service_cannot_write_its_code(host, data, d):
    src = host.file(d.src)
    assert src.user == "root", f"{d.src} owned by {src.user}"
    for path in (d.src, d.venv):
        out = host.run(f"runuser -u {data.get('comfyui_user')} -- test -w {path}")
        assert out.rc != 0, f"{data.get('comfyui_user')} can write {path}"


def test_venv_matches_lock(host, paths, d):
    out = host.run(
        f"{uv_env(paths.uv_cache, paths.tmp)} {paths.uv} pip sync --dry-run "
        f"--require-hashes --python {d.python} {d.lock}"
    )
    drift = [x for x in (out.stdout + out.stderr).splitlines() if x.startswith((" + ", " - "))]
    assert out.rc == 0 and not drift, f"ComfyUI venv differs from its lock: {drift or out.stderr}"


def test_venv_satisfies_the_checkouts_requirements(host, paths, d):
    """The lock follows the pinned ComfyUI: uv finds nothing to install for its requirements.txt."""
    out = host.run(
        f"{uv_env(paths.uv_cache, paths.tmp)} {paths.uv} pip install --dry-run --offline "
        f"--python {d.python} -r {d.src}/requirements.txt"
    )
    text = out.stdout + out.stderr
    assert out.rc == 0 and "Would make no changes" in text, (
        f"the ComfyUI venv does not satisfy {d.src}/requirements.txt (update "
        f"files/comfyui/requirements.in and its lock): {text[-800:]}"
    )


@pytest.mark.parametrize("sub", BASE_SUBDIRS)
def test_base_directory_tree(host, data, d, sub):
    user = data.get("comfyui_user")
    for path in (d.base, f"{d.base}/{sub}"):
        f = host.file(path)
        assert f.is_directory, f"{path} is missing: run deploys/comfyui.py"
        assert f.user == user and f.mode == 0o750, f"{path}: {f.user} {oct(f.mode)}"


def test_the_shipped_workflows_are_on_the_rig(host, d):
    """rigup's API workflows (files/comfyui/workflows) in ``d.workflows``, byte for byte,
    root-owned: rigup-bench --media reads them."""
    shipped = sorted((REPO / "files" / "comfyui" / "workflows").glob("*.json"))
    assert shipped, "no workflow in files/comfyui/workflows"
    for src in shipped:
        f = host.file(f"{d.workflows}/{src.name}")
        assert f.exists, f"{d.workflows}/{src.name} is missing: re-run deploys/comfyui.py"
        assert (f.user, f.group, f.mode) == ("root", "root", 0o644), f"{f.path}: owner or mode"
        assert f.sha256sum == hashlib.sha256(src.read_bytes()).hexdigest(), (
            f"{f.path} differs from files/comfyui/workflows/{src.name}: re-run deploys/comfyui.py"
        )


def test_rendered_arguments_are_the_settings(host, data, d):
    f = host.file(d.args_file)
    assert f.exists, f"{d.args_file} is missing: run deploys/comfyui.py"
    assert json.loads(f.content_string) == main_args(data), "main-args.json differs: re-run"


def _check_args(host, data, d, args_file: str):
    return host.run(
        f"runuser -u {data.get('comfyui_user')} -- env PYTHONDONTWRITEBYTECODE=1 {d.python} "
        f"{d.bin}/check_args.py {d.src} {args_file}"
    )


def test_pinned_parser_accepts_the_arguments(host, data, d):
    out = _check_args(host, data, d, d.args_file)
    assert out.rc == 0, f"ComfyUI's parser rejects the deployed arguments: {out.stdout}{out.stderr}"
    assert json.loads(out.stdout.strip().splitlines()[-1])["ok"] is True


def test_pinned_parser_rejects_a_flag_that_does_not_exist(host, data, d):
    bad = shlex.quote(json.dumps(main_args(data) + ["--data-directory", d.base]))
    out = host.run(
        f"f=$(mktemp -p {d.home}/tmp) && printf '%s' {bad} > $f && chmod 644 $f && "
        f"runuser -u {data.get('comfyui_user')} -- env PYTHONDONTWRITEBYTECODE=1 {d.python} "
        f"{d.bin}/check_args.py {d.src} $f; rc=$?; rm -f $f; exit $rc"
    )
    assert out.rc == 1 and "--data-directory" in out.stdout, out.stdout + out.stderr


@pytest.mark.unit(UNIT)
def test_unit_runs_the_rendered_command_in_the_media_mode(host, data, d):
    assert host.file(d.unit).exists, f"{d.unit} is missing: run deploys/comfyui.py"
    props = _props(
        host, UNIT, "LoadState", "User", "ExecStart", "EnvironmentFiles", "PartOf", "Requires"
    )
    assert props.get("LoadState") == "loaded", props
    assert props.get("User") == data.get("comfyui_user"), props.get("User")
    for arg in main_args(data):
        assert arg in props.get("ExecStart", ""), f"{UNIT} does not pass {arg}"
    for flag in ("--highvram", "--gpu-only"):
        assert flag not in props.get("ExecStart", ""), f"{UNIT} passes {flag}: re-run the deploy"
    assert d.env_file in props.get("EnvironmentFiles", "")
    assert TARGET in props.get("PartOf", "") and TARGET in props.get("Requires", ""), props
    wanted = host.file(f"/etc/systemd/system/{TARGET}.wants/{UNIT}")
    assert host.file(d.unit).content_string.count(f"WantedBy={TARGET}") == 1
    enabled = host.run(f"systemctl is-enabled {UNIT}").stdout.strip()
    assert (enabled == "enabled") == wanted.exists, (enabled, wanted.exists)


@pytest.mark.unit(UNIT)
def test_unit_file_verifies(host):
    out = host.run(f"systemd-analyze verify {UNIT}")
    problems = [x for x in (out.stdout + out.stderr).splitlines() if UNIT in x]
    assert out.rc == 0 and not problems, f"systemd-analyze verify: {out.stdout}{out.stderr}"


@pytest.mark.unit(UNIT)
def test_unit_is_hardened(host, d):
    want = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "RestrictSUIDSGID": "yes",
        "Restart": "always",
    }
    got = _props(host, UNIT, *want, "ReadWritePaths")
    weaker = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
    assert not weaker, f"{UNIT} hardening differs from rigup's unit: {weaker}"
    assert set(got.get("ReadWritePaths", "").split()) == {d.base, d.home}, got


def test_env_file_private_and_complete(host, data, d):
    f = host.file(d.env_file)
    assert f.exists, f"{d.env_file} is missing: re-run deploys/comfyui.py"
    assert (f.user, f.group, f.mode) == ("root", data.get("comfyui_user"), 0o640), (
        f"{f.path}: {f.user}:{f.group} {oct(f.mode)}"
    )
    lines = dict(
        x.split("=", 1) for x in f.content_string.splitlines() if x and not x.startswith("#")
    )
    assert lines == service_env(data), f"{f.path} differs from the settings: re-run the deploy"


def _runnable(host, data) -> bool:
    if data.get("comfyui_cpu"):
        return True
    return data.get("nvidia_gpu_count") > 0 and host.exists("nvidia-smi")


@pytest.mark.unit(UNIT)
def test_service_state_follows_the_mode(host, data):
    svc = host.service(UNIT)
    media = host.run(f"systemctl is-active {TARGET}").stdout.strip() == "active"
    if not _runnable(host, data):
        assert not svc.is_enabled and not svc.is_running, (
            f"{UNIT} must stay stopped and disabled on a host without GPUs or NVIDIA driver"
        )
    elif media:
        assert svc.is_enabled and svc.is_running, f"{UNIT} must run in the media mode"
    else:
        assert svc.is_enabled and not svc.is_running, f"{UNIT} must not run outside media mode"


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
def test_system_stats_answers_in_the_media_mode(host, data):
    if not _runnable(host, data):
        pytest.skip(f"{UNIT} is held back here (no GPU or NVIDIA driver)")
    out = host.run(f"curl -fsS --max-time 10 {system_stats_url(data)}")
    assert out.rc == 0, f"GET {system_stats_url(data)} failed: {out.stderr}"
    stats = json.loads(out.stdout)
    assert stats["system"]["comfyui_version"] == release_of(data).version, stats["system"]
    device = stats["devices"][0]
    assert device["type"] == ("cpu" if data.get("comfyui_cpu") else "cuda"), device
    listening = host.run(f"ss -Hltn 'sport = :{data.get('comfyui_port')}'").stdout.split()
    assert f"{data.get('comfyui_host')}:{data.get('comfyui_port')}" in listening, (
        f"ComfyUI does not listen on {data.get('comfyui_host')} only: {listening}"
    )
