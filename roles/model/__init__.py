"""model: place the LLM checkpoint in a versioned directory and apply the text-only edit.

Settings: model_store_dir, model_name, model_revision, model_source, model_local_path,
vllm_text_only_method. The checkpoint lands in ``<model_store_dir>/<model_name>/<model_revision>``;
a new revision is a new directory, so nothing a user placed is overwritten or deleted.
"""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory
from pyinfra.operations import files

from roles.common.facts import DirectoryInventory
from roles.common.operations import json_file_patched
from roles.common.paths import Paths
from roles.common.settings import require_valid_settings
from roles.model.patch import patch_for

#: Files rigup itself writes into a placed checkpoint (ignored when comparing with the source).
RIGUP_FILES = ("config.json", "config.json.rigup-orig")


def drift(source: dict[str, int], placed: dict[str, int]) -> list[str]:
    """Differences between a source and a placed checkpoint, as ``"path: reason"`` strings.

    Inputs are :class:`DirectoryInventory` results (relative path -> size in bytes). Files rigup
    edits (config.json and its kept original) are not compared.
    """
    problems = []
    for rel, size in sorted(source.items()):
        if rel in RIGUP_FILES:
            continue
        if rel not in placed:
            problems.append(f"{rel}: missing from the placed copy")
        elif placed[rel] != size:
            problems.append(f"{rel}: {placed[rel]} bytes placed, {size} bytes in the source")
    return problems


@operation()
def checkpoint_placed(source: str, dest: str, tmp_dir: str):
    """Copy the checkpoint directory ``source`` to ``dest`` (both on the host), atomically.

    The copy goes to a hidden ``.<name>.partial`` sibling, is compared file by file (sizes) with
    the source, made root-owned and world-readable, then renamed into place; ``dest`` therefore
    exists only when complete. An interrupted copy resumes into the same partial directory. A
    no-op when ``dest`` exists: a placed revision is never overwritten.
    """
    if host.get_fact(Directory, path=dest):
        host.noop(f"checkpoint already placed at {dest}")
        return
    parent, _, name = dest.rstrip("/").rpartition("/")
    partial = f"{parent}/.{name}.partial"
    src, part, dst = shlex.quote(source), shlex.quote(partial), shlex.quote(dest)
    listing = "find . -type f -printf '%s %P\\n' | sort"
    yield f"mkdir -p {part} && cp -a --reflink=auto -T {src} {part}"
    yield (
        f"cd {src} && {listing} > {shlex.quote(tmp_dir)}/checkpoint.src && cd {part} && "
        f"{listing} > {shlex.quote(tmp_dir)}/checkpoint.dst && "
        f"diff -u {shlex.quote(tmp_dir)}/checkpoint.src {shlex.quote(tmp_dir)}/checkpoint.dst"
    )
    yield f"chown -R root:root {part} && chmod -R u=rwX,go=rX {part}"
    yield f"mv -T {part} {dst}"


@deploy("LLM checkpoint")
def model() -> None:
    """Place the checkpoint from ``model_local_path`` and hold its text-only edit.

    Raises ``DeployError`` before any change when the source is missing or is not a checkpoint
    (no config.json) and nothing is placed yet. Differences between an already placed revision
    and its source are reported, never "fixed": the placed files are kept.
    """
    data = host.data
    require_valid_settings(data, host.name)
    p = Paths.from_data(data)
    source = data.model_local_path

    source_files = host.get_fact(DirectoryInventory, path=source)
    placed_files = host.get_fact(DirectoryInventory, path=p.model_dir)
    if placed_files is None:
        if source_files is None:
            raise DeployError(
                f"model_local_path: {source} does not exist on {host.name}, and no checkpoint is "
                f"placed at {p.model_dir} yet (nothing was changed). Mount or copy the checkpoint "
                "there, or point model_local_path at it."
            )
        if "config.json" not in source_files:
            raise DeployError(
                f"model_local_path: {source} has no config.json, so it is not a Hugging Face "
                "checkpoint directory (nothing was changed)"
            )
    elif source_files is not None:
        for problem in drift(source_files, placed_files):
            logger.warning(
                f"[{host.name}] model: {p.model_dir} differs from {source}: {problem} "
                "(kept as is; place a fresh copy under a new model_revision)"
            )

    store = data.model_store_dir.rstrip("/")
    for path in (store, f"{store}/{data.model_name}"):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")

    checkpoint_placed(
        name=f"Place checkpoint {data.model_name}@{data.model_revision}",
        source=source,
        dest=p.model_dir,
        tmp_dir=p.tmp,
    )
    json_file_patched(
        name=f"Text-only edit of config.json ({data.vllm_text_only_method})",
        path=p.model_config,
        original=p.model_config_original,
        patch=patch_for(data.vllm_text_only_method),
        what="text-only edit",
    )
