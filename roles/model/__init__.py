"""model: place models described by manifests, verified and atomically, from local copies,
Hugging Face or ModelScope; the LLM checkpoint and its text-only edit; backups of the store.

Format and API: docs/models.md. Settings: ``model_*``, ``hf_*``, ``modelscope_endpoint``,
``vllm_text_only_method``. A model lands in ``<model_store_dir>/<name>/<revision>``; a placed
revision is never overwritten or deleted (a mismatching file is reported and kept, and replaced
only with ``model_replace_mismatched = True``, the old file set aside).

Other components call :func:`place_model` (and :func:`link_model_files`) from their own deploy.
The transfer itself runs on the host: files/model/model_fetch.py in the model tool venv
(huggingface_hub, hf_xet, modelscope from files/model/requirements.lock, built by uv).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand, deploy, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import Directory, Sha256File
from pyinfra.operations import files

from roles.common.facts import DirectoryInventory, JsonFile
from roles.common.operations import json_file_patched, uv_venv_synced
from roles.common.paths import Paths
from roles.common.settings import require_valid_settings
from roles.model.facts import FreeBytes, ModelCandidates
from roles.model.manifest import Manifest, ManifestError, load_manifest, store_path
from roles.model.patch import patch_for

FILES = Path(__file__).resolve().parents[2] / "files" / "model"
__all__ = [
    "Manifest",
    "ManifestError",
    "PlacedModel",
    "link_model_files",
    "model",
    "model_backup",
    "place_model",
    "placed_path",
]


def _load_fetch_module():
    """files/model/model_fetch.py as a module: its pure checks are shared with the controller."""
    spec = importlib.util.spec_from_file_location("rigup_model_fetch", FILES / "model_fetch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


model_fetch = _load_fetch_module()


@dataclass(frozen=True)
class PlacedModel:
    """What :func:`place_model` returns.

    + name, revision: the manifest's; path: ``<model_store_dir>/<name>/<revision>`` (absolute,
      exists once the run has executed the placement)
    + files: ``{dest: absolute path}`` for each ``[[files]]`` entry ({} for an unpinned manifest
      that selects files by patterns)
    + manifest: the validated :class:`Manifest`
    + operation: the placement's ``OperationMeta`` (``_if=placed.operation.did_change``)
    """

    name: str
    revision: str
    path: str
    files: dict[str, str]
    manifest: Manifest
    operation: OperationMeta | None = field(default=None, compare=False)


def placed_path(data: Any, manifest: str) -> str:
    """Absolute directory of the placed model ``manifest`` for settings ``data`` (host.data or a
    dict), without planning anything. Raises :class:`ManifestError` for a bad manifest."""
    return store_path(str(data.get("model_store_dir")), load_manifest(manifest))


def fetch_argv(data: Any, p: Paths, manifest: Manifest, manifest_file: str, dest: str) -> str:
    """The shell command that places ``manifest`` at ``dest`` on the host (model_fetch.py place).

    Only the token's FILE path is passed, never the token. Pure (tested in tests/unit).
    """
    argv = [
        p.model_tool_python,
        p.model_fetch,
        "place",
        "--manifest",
        manifest_file,
        "--dest",
        dest,
        "--sources",
        ",".join(data.get("model_sources")),
        "--link",
        data.get("model_local_link"),
        "--report",
        f"{p.model_reports}/{manifest.name}@{manifest.revision}.json",
    ]
    for root in data.get("model_local_dirs"):
        argv += ["--local-dir", root]
    if data.get("hf_endpoint"):
        argv += ["--hf-endpoint", data.get("hf_endpoint")]
    if "huggingface" in data.get("model_sources"):
        argv += ["--hf-token-file", p.hf_token_file]
    if data.get("modelscope_endpoint"):
        argv += ["--modelscope-endpoint", data.get("modelscope_endpoint")]
    if "modelscope" in data.get("model_sources"):
        argv += ["--modelscope-token-file", p.modelscope_token_file]
    if data.get("model_replace_mismatched"):
        argv.append("--replace-mismatched")
    env = f"TMPDIR={shlex.quote(p.tmp)} HF_HUB_DISABLE_TELEMETRY=1"
    return f"{env} {shlex.join(argv)}"


def placed_mismatches(manifest: Manifest, record: dict | None, sizes: dict[str, int]) -> list[str]:
    """Files of a placed copy that are missing or differ in size from the manifest/record, as
    ``"dest: problem"`` strings. ``sizes`` is a :class:`DirectoryInventory` of the placed dir."""
    recorded = {f["dest"]: f for f in (record or {}).get("files", [])}
    return [
        f"{m['dest']}: {m['problem']}"
        for m in model_fetch.size_mismatches(manifest.to_json()["files"], recorded, sizes)
    ]


def run_with_progress(state, host, command: str) -> bool:
    """Run ``command`` on the host with its output printed as it comes (pyinfra shows command
    output only with ``-v``; a transfer of many GB must show progress without it). The
    operation's connector arguments (``_sudo``, ``_env``, ...) apply as to any command."""
    arguments = {
        key: value
        for key, value in (host.current_op_global_arguments or {}).items()
        if key in CONNECTOR_ARGUMENT_KEYS
    }
    status, _ = host.run_shell_command(StringCommand(command), print_output=True, **arguments)
    return status


@operation()
def model_placed(command: str, dest: str, manifest: Manifest, replace_mismatched: bool):
    """Place a model at ``dest`` by running ``command`` (see :func:`fetch_argv`), unless a
    complete copy is there.

    A placed copy is checked by size against its record/manifest (cheap: no hashing on every
    run): a mismatch is reported and kept, or repaired by ``command`` when
    ``replace_mismatched``. A no-op on a complete copy.
    """
    sizes = host.get_fact(DirectoryInventory, path=dest)
    if sizes is not None:
        record = host.get_fact(JsonFile, path=f"{dest}/{model_fetch.RECORD}")
        problems = placed_mismatches(manifest, record, sizes)
        if not problems:
            host.noop(f"{manifest.name}@{manifest.revision} is placed at {dest}")
            return
        for problem in problems:
            logger.warning(
                f"[{host.name}] model {manifest.name}: {dest}/{problem} "
                + (
                    "(replacing it; the old file is kept as *.rigup-mismatch-<time>)"
                    if replace_mismatched
                    else "(kept as is; set model_replace_mismatched = True to replace it)"
                )
            )
        if not replace_mismatched:
            host.noop(f"{manifest.name}: mismatching files kept (model_replace_mismatched)")
            return
    yield FunctionCommand(run_with_progress, (command,), {})


@operation()
def secret_file(path: str, secret: str | None, what: str):
    """Hold a secret in ``path`` (root, 0600) without it ever appearing in pyinfra's output.

    + path: file on the host; its directory must be root-only (0700) so the upload's temporary
      file is never readable by others
    + secret: the value (from the controller's environment); None leaves the file as it is
    + what: description for messages (never the value)

    Compared by sha256 (pyinfra's Sha256File fact); uploaded with a raw FileUploadCommand
    because ``files.put`` prints file contents under ``--diff``.
    """
    if not secret:
        host.noop(f"{what}: not set on the controller; {path} left as it is")
        return
    if host.get_fact(Sha256File, path=path) == hashlib.sha256(secret.encode()).hexdigest():
        host.noop(f"{what}: {path} is current")
        return
    directory = path.rsplit("/", 1)[0]
    yield FileUploadCommand(
        StringIO(secret),
        path,
        remote_temp_filename=host.get_temp_filename(path, temp_directory=directory),
    )
    yield StringCommand("chown", "root:root", path, "&&", "chmod", "600", path)


_TOOL_PLANNED: set[str] = set()


def _model_tool(data: Any, p: Paths) -> None:
    """The model tool venv, its script, the manifest and token directories (once per host)."""
    if host.name in _TOOL_PLANNED:
        return
    _TOOL_PLANNED.add(host.name)
    for path, mode in (
        (p.model_tool_root, "755"),
        (p.model_tool_bin, "755"),
        (p.model_etc, "755"),
        (p.model_manifests_dir, "755"),
        (p.model_secrets_dir, "700"),
        (p.model_reports, "755"),
    ):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode=mode)
    files.put(
        name="Model tool lock file",
        src=str(FILES / "requirements.lock"),
        dest=p.model_tool_lock,
        mode="644",
    )
    uv_venv_synced(
        name="Model tool venv (huggingface_hub, hf_xet, modelscope; uv, locked)",
        venv=p.model_tool_venv,
        lock=p.model_tool_lock,
        python=data.get("model_tool_python"),
        uv=p.uv,
        cache_dir=p.uv_cache,
        tmp_dir=p.tmp,
    )
    files.put(
        name="Script model_fetch.py",
        src=str(FILES / "model_fetch.py"),
        dest=p.model_fetch,
        mode="755",
    )
    for source, hub, env_key, path in (
        ("huggingface", "Hugging Face", "hf_token_env", p.hf_token_file),
        ("modelscope", "ModelScope", "modelscope_token_env", p.modelscope_token_file),
    ):
        if source in data.get("model_sources"):
            env_name = data.get(env_key)
            secret_file(
                name=f"{hub} token from ${env_name} (0600)",
                path=path,
                secret=os.environ.get(env_name) or None,
                what=f"{hub} token (${env_name})",
            )


def _require_source(data: Any, manifest: Manifest, dest: str, p: Paths) -> bool:
    """Before any change: a model that is not placed needs a source that can provide it and
    room on the disk. Raises DeployError with the reason and the numbers. Returns whether the
    model still has to be placed."""
    if host.get_fact(Directory, path=dest):
        return False
    sources = list(data.get("model_sources"))
    hub = [s for s in sources if s != "local"]
    if hub and not manifest.locked and "local" not in sources:
        raise DeployError(
            f"model {manifest.name}: its manifest ({manifest.source_file}) is unpinned (no "
            f"commit, no sha256), and {', '.join(hub)} downloads only locked manifests (nothing "
            "was changed). Lock it with files/model/model_lock.py where the hub is reachable, or "
            "add a local copy to model_local_dirs and 'local' to model_sources."
        )
    roots = list(data.get("model_local_dirs"))
    candidates = host.get_fact(
        ModelCandidates,
        model=manifest.name,
        revision=manifest.revision,
        basename=manifest.repo_id.split("/")[-1],
        hf_cache=f"models--{manifest.repo_id.replace('/', '--')}",
        roots=roots,
    )
    local_ok = "local" in sources and bool(candidates)
    if not local_ok and not (hub and manifest.locked):
        where = ", ".join(roots) or "(model_local_dirs is empty)"
        raise DeployError(
            f"model {manifest.name}@{manifest.revision}: no copy found under {where} on "
            f"{host.name}, nothing is placed at {dest} yet, and no other source can provide it "
            f"(model_sources = {sources}; hub downloads need a locked manifest); nothing was "
            f"changed. Mount or copy it to {roots[0] if roots else '<dir>'}/{manifest.name}/ "
            "or add a source."
        )
    total = manifest.total_bytes
    if total is None and local_ok and candidates[0][1] != "hf-cache":
        inventory = host.get_fact(DirectoryInventory, path=candidates[0][0]) or {}
        if (
            not manifest.files
            and "config.json" not in inventory
            and manifest.name == data.get("model_llm_manifest")
        ):
            raise DeployError(
                f"model {manifest.name}: {candidates[0][0]} has no config.json, so it is not a "
                "Hugging Face checkpoint directory (nothing was changed)"
            )
        total = sum(size for rel, size in inventory.items() if manifest.selects(rel))
    if total is not None:
        free = host.get_fact(FreeBytes, path=dest)
        if free is not None and total + model_fetch.SPARE_BYTES > free:
            raise DeployError(
                f"model {manifest.name}@{manifest.revision}: {total / 1e9:.2f} GB to place + "
                f"{model_fetch.SPARE_BYTES / 2**30:.0f} GiB spare, but only {free / 1e9:.2f} GB "
                f"free under {data.get('model_store_dir')} on {host.name} (nothing was changed)"
            )
    return True


def place_model(manifest: str) -> PlacedModel:
    """Plan the placement of the model described by ``manifest`` and return where it lands.

    Call it inside a ``@deploy`` (its operations join that deploy). ``manifest`` is a name under
    files/model/manifests/ or an absolute path to a .toml file. Sources, local dirs, endpoints,
    token and store come from ``host.data``. Raises :class:`ManifestError` or ``DeployError``
    before any change (bad manifest, no source can provide it, not enough free space).
    """
    data = host.data
    m = load_manifest(manifest)
    p = Paths.from_data(data)
    dest = store_path(data.model_store_dir, m)
    to_place = _require_source(data, m, dest, p)
    token_env = data.hf_token_env
    if (
        to_place
        and m.gated
        and "huggingface" in data.model_sources
        and not os.environ.get(token_env)
    ):
        logger.warning(
            f"[{host.name}] model {m.name}: {m.repo_id} is gated on Hugging Face and ${token_env} "
            "is not set on the controller: a download from the hub would be refused"
        )
    _model_tool(data, p)
    store = data.model_store_dir.rstrip("/")
    for path in (store, f"{store}/{m.name}"):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    manifest_file = f"{p.model_manifests_dir}/{m.name}.json"
    files.put(
        name=f"Manifest {m.name} (JSON for model_fetch.py)",
        src=StringIO(json.dumps(m.to_json(), indent=1, sort_keys=True) + "\n"),
        dest=manifest_file,
        mode="644",
    )
    op = model_placed(
        name=f"Place model {m.name}@{m.revision}",
        command=fetch_argv(data, p, m, manifest_file, dest),
        dest=dest,
        manifest=m,
        replace_mismatched=bool(data.model_replace_mismatched),
    )
    return PlacedModel(
        name=m.name,
        revision=m.revision,
        path=dest,
        files={f.dest: f"{dest}/{f.dest}" for f in m.files},
        manifest=m,
        operation=op,
    )


def link_model_files(placed: PlacedModel, into: str) -> None:
    """Symlink each file of ``placed`` to ``<into>/<dest>`` (e.g. ComfyUI's models directory),
    creating subfolders. Raises ``DeployError`` for a manifest without ``[[files]]``. A regular
    file a user put at a link path is never replaced: pyinfra's ``files.link`` fails on it."""
    if not placed.files:
        raise DeployError(
            f"model {placed.name}: its manifest selects files by patterns; list them in "
            "[[files]] (with dest) to link them one by one"
        )
    base = into.rstrip("/")
    for dest in sorted({d.rsplit("/", 1)[0] for d in placed.files if "/" in d}):
        files.directory(name=f"Directory {base}/{dest}", path=f"{base}/{dest}", mode="755")
    for dest, target in sorted(placed.files.items()):
        files.link(name=f"Link {base}/{dest}", path=f"{base}/{dest}", target=target)


@deploy("LLM checkpoint")
def model() -> PlacedModel:
    """Place the LLM (manifest ``model_llm_manifest``) and hold its text-only edit.

    Raises ``SettingsError``/``ManifestError``/``DeployError`` before any change (see
    :func:`place_model`). Returns the :class:`PlacedModel`.
    """
    data = host.data
    require_valid_settings(data, host.name)
    p = Paths.from_data(data)
    placed = place_model(data.model_llm_manifest)
    json_file_patched(
        name=f"Text-only edit of config.json ({data.vllm_text_only_method})",
        path=p.model_config,
        original=p.model_config_original,
        patch=patch_for(data.vllm_text_only_method),
        what="text-only edit",
    )
    return placed


def backup_argv(p: Paths, store: str, to: str) -> str:
    """The shell command that copies every placed model of ``store`` to ``to``, verified."""
    return shlex.join(
        [
            p.model_tool_python,
            p.model_fetch,
            "backup",
            "--store",
            store,
            "--to",
            to,
            "--report",
            f"{p.model_reports}/backup.json",
        ]
    )


@deploy("Model backup")
def model_backup() -> None:
    """Copy every placed model (``<model_store_dir>/<name>/<revision>`` with its record) to
    ``model_backup_dir``, each file checked against the sha256 recorded at placement, each model
    renamed into place when complete; models already in the backup are skipped. Restore: add
    the backup directory to ``model_local_dirs`` (docs/models.md, README "Rebuild")."""
    data = host.data
    require_valid_settings(data, host.name)
    to = data.model_backup_dir
    if not to:
        raise DeployError(
            "model_backup_dir is empty: set it to the backup disk or NAS path, e.g. "
            "--data model_backup_dir=/mnt/backup/rigup-models (nothing was changed)"
        )
    p = Paths.from_data(data)
    _model_tool(data, p)
    from pyinfra.operations import server

    server.shell(
        name=f"Back up {data.model_store_dir} to {to}",
        commands=[backup_argv(p, data.model_store_dir, to)],
    )
