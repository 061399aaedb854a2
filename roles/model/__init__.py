"""model: place models described by manifests, verified and atomically, from local copies,
Hugging Face or ModelScope; lock an unpinned manifest on its first placement; the LLM
checkpoint and its text-only edit; backups of the store.

Format and API: docs/models.md. Settings: ``model_*``, ``hf_*``, ``modelscope_*`` (rules in
roles/model/settings.py). A model lands in ``<model_store_dir>/<name>/<revision>``; a placed
revision is never overwritten or deleted: a copy that does not match fails the run, naming the
files, and is replaced only with ``model_replace_mismatched = True`` (the old files set aside).

:func:`model_store` installs the model tool and returns a :class:`ModelStore`; other components
place their models with :meth:`ModelStore.place` (and :func:`link_model_files`) from their own
deploy. The transfer itself runs on the host: files/model/model_fetch.py and the ``modeltool``
package beside it, in the model tool venv (huggingface_hub, hf_xet, modelscope from
files/model/requirements.lock, built by uv).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from io import StringIO
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import server

from roles.common.operations import json_file_patched, secret_file
from roles.common.placed import directory_placed, file_placed, link_placed, survey, tree_placed
from roles.common.venv import locked_venv
from roles.model.commands import FILES, TOOL, backup_argv, fetch_argv, layout, verify_argv
from roles.model.manifest import Manifest, ManifestError, load_manifest, lock_path, store_path
from roles.model.operations import manifest_json, model_placed
from roles.model.patch import patch_for
from roles.model.paths import ModelPaths
from roles.model.preflight import require_source

#: the record of what was placed, in every placed directory (its sha256 changes when the model is
#: placed again)
PLACEMENT_RECORD = layout.RECORD

__all__ = [
    "PLACEMENT_RECORD",
    "Manifest",
    "ManifestError",
    "ModelStore",
    "PlacedModel",
    "link_model_files",
    "model",
    "model_backup",
    "model_store",
    "placed_path",
]


@dataclass(frozen=True)
class PlacedModel:
    """What :meth:`ModelStore.place` returns.

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


@dataclass(frozen=True)
class ModelStore:
    """The model store of one host, its tool installed (what :func:`model_store` returns).

    + settings: the host's checked settings; paths: :class:`ModelPaths`
    """

    settings: Any
    paths: ModelPaths

    def place(self, manifest: str) -> PlacedModel:
        """Plan the placement of the model described by ``manifest`` and return where it lands.

        Call it inside a ``@deploy`` (its operations join that deploy). ``manifest`` is a name
        under files/model/manifests/ or an absolute path to a .toml file; its lock (beside it, or
        in ``model_lock_dir``) pins its files when there is one. Without one, a placement from
        Hugging Face locks it: the lock is written on the controller (and named at the end of
        the run). Raises :class:`ManifestError` or ``DeployError`` before any change (bad
        manifest or lock, no source can provide it, not enough free space).
        """
        data, p = self.settings, self.paths
        m = load_manifest(manifest, data.model_lock_dir)
        dest = store_path(p.store, m)
        lock_file = None
        if not m.locked and "huggingface" in data.model_sources:
            lock_file = str(lock_path(m.source_file, data.model_lock_dir))
        to_place = require_source(data, m, dest, lock_file)
        token_env = data.hf_token_env
        if (
            to_place
            and m.gated
            and "huggingface" in data.model_sources
            and not os.environ.get(token_env)
        ):
            logger.warning(
                f"[{host.name}] model {m.name}: {m.repo_id} is gated on Hugging Face and "
                f"${token_env} is not set on the controller: a download from the hub would be "
                "refused"
            )
        manifest_file = f"{p.manifests_dir}/{m.name}.json"
        survey((p.store, f"{p.store}/{m.name}", manifest_file))
        for path in (p.store, f"{p.store}/{m.name}"):
            directory_placed(
                name=f"Directory {path}", path=path, user="root", group="root", mode="755"
            )
        file_placed(
            name=f"Manifest {m.name} (JSON for model_fetch.py)",
            src=StringIO(manifest_json(m)),
            dest=manifest_file,
            mode="644",
        )
        op = model_placed(
            name=f"Place model {m.name}@{m.revision}",
            command=fetch_argv(data, m, manifest_file, dest),
            dest=dest,
            manifest=m,
            replace_mismatched=bool(data.model_replace_mismatched),
            verify_command=verify_argv(data, dest) if data.model_verify_sha256 else None,
            lock_file=lock_file,
            manifest_file=manifest_file,
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
    subdirs = sorted({d.rsplit("/", 1)[0] for d in placed.files if "/" in d})
    survey([*(f"{base}/{d}" for d in subdirs), *(f"{base}/{d}" for d in placed.files)])
    for dest in subdirs:
        directory_placed(name=f"Directory {base}/{dest}", path=f"{base}/{dest}", mode="755")
    for dest, target in sorted(placed.files.items()):
        link_placed(name=f"Link {base}/{dest}", path=f"{base}/{dest}", target=target)


@deploy("Model tool")
def model_store(settings) -> ModelStore:
    """The model tool venv, its script, the manifest and token directories; returns the
    :class:`ModelStore` through which every component places its models."""
    p = ModelPaths.from_data(settings)
    directories = (
        (p.root, "755"),
        (p.bin, "755"),
        (p.etc, "755"),
        (p.manifests_dir, "755"),
        (p.secrets_dir, "700"),
        (p.reports, "755"),
    )
    survey([*(path for path, _ in directories), p.lock, f"{p.venv}/.lock", p.fetch])
    for path, mode in directories:
        directory_placed(name=f"Directory {path}", path=path, user="root", group="root", mode=mode)
    locked_venv(
        settings,
        what="Model tool",
        contents="huggingface_hub, hf_xet, modelscope",
        lock_src=FILES / "requirements.lock",
        lock=p.lock,
        venv=p.venv,
        python=settings.model_tool_python,
    )
    file_placed(
        name="Script model_fetch.py", src=str(FILES / "model_fetch.py"), dest=p.fetch, mode="755"
    )
    tree_placed(
        name="The model tool (modeltool package beside model_fetch.py)",
        src=str(TOOL),
        dest=f"{p.bin}/modeltool",
        user="root",
        group="root",
        mode="644",
        dir_mode="755",
    )
    for source, hub, env_key, path in (
        ("huggingface", "Hugging Face", "hf_token_env", p.hf_token_file),
        ("modelscope", "ModelScope", "modelscope_token_env", p.modelscope_token_file),
    ):
        if source in settings.model_sources:
            env_name = settings.get(env_key)
            secret_file(
                name=f"{hub} token from ${env_name} (0600)",
                path=path,
                secret=os.environ.get(env_name) or None,
                what=f"{hub} token (${env_name})",
            )
    return ModelStore(settings=settings, paths=p)


@deploy("LLM checkpoint")
def model(settings, store: ModelStore) -> PlacedModel:
    """Place the LLM (manifest ``model_llm_manifest``) and hold its text-only edit.

    Raises ``ManifestError``/``DeployError`` before any change (see :meth:`ModelStore.place`).
    Returns the :class:`PlacedModel` the vLLM role serves.
    """
    placed = store.place(settings.model_llm_manifest)
    json_file_patched(
        name=f"Text-only edit of config.json ({settings.vllm_text_only_method})",
        path=f"{placed.path}/config.json",
        original=f"{placed.path}/config.json.rigup-orig",
        patch=patch_for(settings.vllm_text_only_method),
        what="text-only edit",
    )
    return placed


@deploy("Model backup")
def model_backup(settings, store: ModelStore) -> None:
    """Copy every placed model (``<model_store_dir>/<name>/<revision>`` with its record) to
    ``model_backup_dir``, each file checked against the sha256 recorded at placement, each model
    renamed into place when complete; models already in the backup are skipped. Restore: add
    the backup directory to ``model_local_dirs`` (docs/models.md, docs/rig.md "Rebuild after a disk failure")."""
    to = settings.model_backup_dir
    if not to:
        raise DeployError(
            "model_backup_dir is empty: set it to the backup disk or NAS path, e.g. "
            "--data model_backup_dir=/mnt/backup/rigup-models (nothing was changed)"
        )
    server.shell(
        name=f"Back up {settings.model_store_dir} to {to}",
        commands=[backup_argv(settings, store.paths.store, to)],
    )
