"""The commands the model role runs on a host (files/model/model_fetch.py and the ``modeltool``
package beside it), as pure functions, and the checks of a placed copy the controller shares
with that tool."""

from __future__ import annotations

import importlib
import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Any

from roles.common.paths import Layout
from roles.common.uv import PackageSources
from roles.model.manifest import Manifest
from roles.model.paths import ModelPaths

FILES = Path(__file__).resolve().parents[2] / "files" / "model"
TOOL = FILES / "modeltool"


def _load_tool():
    """files/model/modeltool as the package ``modeltool``: the model tool's pure parts (names in
    the store, what a placed directory should hold, the lock file) are shared with the
    controller, never copied."""
    if "modeltool" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "modeltool", TOOL / "__init__.py", submodule_search_locations=[str(TOOL)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["modeltool"] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules["modeltool"]


modeltool = _load_tool()
layout = importlib.import_module("modeltool.layout")
snapshot = importlib.import_module("modeltool.snapshot")
lockfile = importlib.import_module("modeltool.lockfile")


def _env(data: Any) -> str:
    return (
        f"TMPDIR={shlex.quote(Layout.from_data(data).tmp)} HF_HUB_DISABLE_TELEMETRY=1 "
        "HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONDONTWRITEBYTECODE=1"
    )


def fetch_argv(data: Any, manifest: Manifest, manifest_file: str, dest: str) -> str:
    """The shell command that places ``manifest`` at ``dest`` on the host (model_fetch.py place).

    Only the token's FILE path is passed, never the token.
    """
    p = ModelPaths.from_data(data)
    argv = [
        p.python,
        p.fetch,
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
        f"{p.reports}/{manifest.name}@{manifest.revision}.json",
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
    if data.get("model_verify_sha256"):
        argv.append("--verify-sha256")
    return f"{_env(data)} {shlex.join(argv)}"


def verify_argv(data: Any, dest: str) -> str:
    """The shell command that checks a placed model byte for byte against its record
    (model_fetch.py verify): one JSON line on stdout."""
    p = ModelPaths.from_data(data)
    return f"{_env(data)} {shlex.join([p.python, p.fetch, 'verify', '--dir', dest])}"


def placed_problems(manifest: Manifest, record: dict | None, sizes: dict[str, int]) -> list[str]:
    """What is wrong with a placed copy, from its inventory (``sizes``: a
    :class:`DirectoryInventory`) and record, without hashing: files missing or of another
    size, files recorded with another sha256 than the manifest (or its lock) pins, and files
    that are not the model's. ``"dest: problem"`` strings; [] for a good copy."""
    recorded = {f["dest"]: f for f in (record or {}).get("files", [])}
    wanted = manifest.to_json()["files"]
    out = [
        f"{m['dest']}: {m['problem']}" for m in snapshot.size_mismatches(wanted, recorded, sizes)
    ]
    bad = {line.split(": ", 1)[0] for line in out}
    for f in wanted:
        rec = recorded.get(f["dest"], {}).get("sha256")
        if f["sha256"] and rec and f["sha256"] != rec and f["dest"] not in bad:
            out.append(f"{f['dest']}: placed with sha256 {rec}, {f['sha256']} expected")
    dests = {f["dest"] for f in wanted} or set(recorded)
    out += [f"{s}: not part of the model" for s in snapshot.unexpected_files(dests, set(sizes))]
    return out


def backup_argv(data: Any, store: str, to: str) -> str:
    """The shell command that copies every placed model of ``store`` to ``to``, verified, and
    what the venvs under ``rigup_prefix`` need to be rebuilt offline (their wheels, from the
    host's package indexes, and the CPython builds)."""
    p = ModelPaths.from_data(data)
    argv = [p.python, p.fetch, "backup", "--store", store, "--to", to,
            "--prefix", Layout.from_data(data).prefix, "--report", f"{p.reports}/backup.json"]  # fmt: skip
    for index in PackageSources.from_data(data).indexes():
        argv += ["--index", index]
    return f"{_env(data)} {shlex.join(argv)}"
