"""Operations shared by rigup's roles.

Each one reads the host's state through facts when it runs (pyinfra 3 evaluates an operation's
body at execution time too), so an operation planned before an earlier one changed the host
still does the right thing, and a converged host yields no commands: a no-op, not a change.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shlex
from collections.abc import Callable
from io import StringIO
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import Sha256File
from pyinfra.operations import files, server

from roles.common.facts import (
    SYNCED_STAMP,
    Account,
    CheckStamp,
    JsonFile,
    UvSyncPending,
    VenvSynced,
    uv_env,
    venv_fingerprint,
)

#: per host, while planning: :class:`VenvSynced` by (venv, lock, uv), read once for both
#: :func:`uv_venv_synced` and :func:`uv_venv_recorded` (nothing changes a host while planning)
_PLANNED_SYNCED: WeakKeyDictionary[Any, dict[tuple[str, str, str], bool]] = WeakKeyDictionary()


def _venv_synced(venv: str, lock: str, uv: str) -> bool:
    """:class:`VenvSynced` of the venv: read once per planning, fresh when operations run."""
    if host.state.is_executing:
        return bool(host.get_fact(VenvSynced, venv=venv, lock=lock, uv=uv))
    planned = _PLANNED_SYNCED.setdefault(host, {})
    if (venv, lock, uv) not in planned:
        planned[venv, lock, uv] = bool(host.get_fact(VenvSynced, venv=venv, lock=lock, uv=uv))
    return planned[venv, lock, uv]


def fingerprint(*parts: Any) -> str:
    """Stable sha256 hex digest of JSON-serialisable parts (dicts are key-sorted)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@operation()
def uv_venv_synced(
    venv: str,
    lock: str,
    python: str,
    uv: str,
    cache_dir: str,
    tmp_dir: str,
    mislabelled: tuple[str, ...] = (),
    sources: str = "",
):
    """Make the venv at ``venv`` hold exactly the packages of ``lock`` (hash-checked).

    + venv: venv directory (created with ``uv venv --python python`` when absent)
    + lock: requirements file on the host with ``--hash`` lines (``uv pip compile --generate-hashes``)
    + python: interpreter for a new venv (``python3`` or a path); uv never downloads one here
    + uv: path of the uv binary; cache_dir / tmp_dir: uv's wheel cache and temp directory
    + mislabelled: distributions uv reinstalls at every sync because their wheel's WHEEL file
      contradicts its file name (see :class:`UvSyncPending`); not counted as a difference
    + sources: where packages come from, as uv environment words
      (:meth:`roles.common.uv.PackageSources.uv_env`; "" for PyPI)

    A no-op when the venv is as the last sync left it (:class:`VenvSynced`: the fingerprint
    each sync records in ``<venv>/.rigup-synced``; one round trip instead of uv's dry run);
    otherwise ``uv pip sync --dry-run`` decides (a venv that matches but has no record gets
    it from :func:`uv_venv_recorded`). Raises ``OperationError`` when
    uv cannot evaluate the lock (its message is included).
    """
    python_bin = f"{venv}/bin/python"
    if _venv_synced(venv, lock, uv):
        host.noop(f"venv {venv} matches {lock} (unchanged since its last sync)")
        return
    pending = host.get_fact(
        UvSyncPending,
        uv=uv,
        python=python_bin,
        lock=lock,
        cache_dir=cache_dir,
        tmp_dir=tmp_dir,
        mislabelled=tuple(mislabelled),
        **({"sources": sources} if sources else {}),
    )
    if pending == []:
        host.noop(f"venv {venv} matches {lock}")
        return
    if pending and pending[0].startswith("!error"):
        raise OperationError(f"uv could not check {venv} against {lock}: {pending[0][8:]}")
    env = uv_env(cache_dir, tmp_dir, sources)
    yield f"mkdir -p {shlex.quote(tmp_dir)} {shlex.quote(cache_dir)}"
    if pending is None:
        yield f"{env} {shlex.quote(uv)} venv --python {shlex.quote(python)} {shlex.quote(venv)}"
    yield sync_command(env, uv, venv, lock)
    yield record_command(venv, lock, uv)


def sync_command(env: str, uv: str, venv: str, lock: str) -> str:
    """``uv pip sync`` of the venv at ``venv`` to ``lock``, hash-checked, its bytecode compiled
    (:data:`roles.common.facts.SYNC_FORM`); ``env``: :func:`uv_env`'s words."""
    python_bin = shlex.quote(f"{venv}/bin/python")
    return (
        f"{env} {shlex.quote(uv)} pip sync --require-hashes --compile-bytecode "
        f"--python {python_bin} {shlex.quote(lock)}"
    )


def record_command(venv: str, lock: str, uv: str) -> str:
    """The command that records the venv's :func:`venv_fingerprint` in ``<venv>/.rigup-synced``
    (read by :class:`VenvSynced`)."""
    return f"{venv_fingerprint(venv, lock, uv)} > {shlex.quote(f'{venv}/{SYNCED_STAMP}')}"


@operation()
def uv_venv_recorded(
    venv: str, lock: str, uv: str, cache_dir: str, tmp_dir: str, sources: str = ""
):
    """Record that the venv at ``venv`` matches ``lock`` (after :func:`uv_venv_synced`), so the
    next run reads one fingerprint instead of running uv's dry run. A separate operation,
    tracked by nothing: a venv whose packages already match but that has no current record
    (converged by uv alone, or synced without compiled bytecode:
    :data:`roles.common.facts.SYNC_FORM`) gets its bytecode compiled (``uv pip sync --compile-bytecode`` with nothing to install compiles the
    site-packages) and the record once, without counting as new software (no check re-runs,
    no service restarts for it). A no-op when the record is current (after a sync, which
    writes it). ``cache_dir``, ``tmp_dir``, ``sources``: as :func:`uv_venv_synced`."""
    if _venv_synced(venv, lock, uv):
        host.noop(f"venv {venv}: its sync is recorded")
        return
    yield sync_command(uv_env(cache_dir, tmp_dir, sources), uv, venv, lock)
    yield record_command(venv, lock, uv)


@operation()
def check_passes(command: str, stamp: str, key: str, what: str, watch: tuple[str, ...] = ()):
    """Run a check command on the host until it passes for the inputs summarised by ``key``.

    + command: shell command that exits 0 when the check passes (its output explains failures)
    + stamp: file where the key of the last passing inputs is recorded (root-owned, 0644)
    + key: fingerprint of everything the check depends on (see :func:`fingerprint`)
    + what: short description for the no-op message
    + watch: files on the host that are inputs too (a placed model's record, its config.json):
      their sha256, read when the operation runs, is part of the key, so a file replaced by
      anything (a later run, an orphaned transfer of an earlier one) is checked again

    The check re-runs whenever ``key`` changes, so a converged host pays nothing and any change to
    the checked inputs is checked again. A failing check fails the operation (and the deploy).
    """
    state = host.get_fact(CheckStamp, stamp=stamp, watch=tuple(watch)) or {}
    if watch:
        key = fingerprint(key, state.get("watch") or [None] * len(watch))
    if state.get("stamp") == key:
        host.noop(f"{what}: passed before for these inputs")
        return
    # a subshell: a command that ends with `exit` still lets the stamp be written after it
    yield f"( {command} ) && printf '%s\\n' {shlex.quote(key)} > {shlex.quote(stamp)}"


@operation()
def json_file_patched(path: str, original: str, patch: Callable[[Any], Any], what: str):
    """Hold ``path`` at ``patch(original JSON)``, keeping the untouched file at ``original``.

    + path: the JSON file to edit (e.g. a model's config.json)
    + original: where the first version of the file is kept (copied once, never overwritten)
    + patch: pure function from the original JSON value to the desired one; returning the value
      unchanged means "no edit" (a file edited earlier is then restored to the original)
    + what: name of the edit for messages

    Declarative and idempotent: the desired content is always computed from the original, never
    from an already-edited file. Shown as a diff under ``--dry --diff``. Raises
    ``OperationError`` when the file is absent at execution time.
    """
    saved = host.get_fact(JsonFile, path=original)
    current = host.get_fact(JsonFile, path=path)
    if current is None:
        if host.state.is_executing:
            raise OperationError(f"{what}: {path} does not exist")
        # Planning before the file is placed: report the edit; it is computed when it runs.
        yield StringCommand("true", "#", f"{what}: {path} is edited once it is in place")
        return
    source = saved if saved is not None else current
    desired = patch(copy.deepcopy(source))
    if desired == current:
        host.noop(f"{what}: {path} is as wanted")
        return
    if saved is None:
        yield f"cp -p {shlex.quote(path)} {shlex.quote(original)}"
    text = json.dumps(desired, indent=2, ensure_ascii=False) + "\n"
    yield from files.put._inner(src=StringIO(text), dest=path, mode="644")


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


@operation()
def service_account(user: str, home: str, shell: str, groups: tuple[str, ...], comment: str):
    """A system account ``user`` (its own group, supplementary ``groups`` exactly) with ``home``
    owned by it, ``shell`` and ``comment``: what pyinfra's ``server.user`` makes (it does
    so when anything differs), decided from one :class:`Account` round trip instead of its
    ``Users``, ``Groups``, ``Os`` and ``Directory`` facts."""
    current = host.get_fact(Account, user=user, home=home)
    if (
        current is not None
        and current["home"] == home
        and current["shell"] == shell
        and current["comment"] == comment
        and set(current["groups"]) == set(groups)
        and current["home_owner"] == f"{user}:{user}"
    ):
        host.noop(f"account {user} is as wanted")
        return
    yield from server.user._inner(
        user=user,
        system=True,
        home=home,
        shell=shell,
        groups=list(groups),
        comment=comment,
    )
