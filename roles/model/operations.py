"""Operations of the model role: placing a model (and writing its lock on the controller)."""

from __future__ import annotations

import atexit
import fcntl
import json
import re
import sys
from io import StringIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FactBase, FunctionCommand, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.exceptions import OperationError

from roles.common.facts import DirectoryInventory, JsonFile
from roles.model.commands import layout, lockfile, placed_problems
from roles.model.manifest import Manifest, load_manifest


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


class ModelVerification(FactBase):
    """``model_fetch.py verify`` of a placed model: ``{"status": "ok"|"mismatch", "problems":
    [...], "sha256_checked": N}`` (every file hashed), or None when the tool could not run."""

    def command(self, command: str) -> str:
        return f"{command} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict | None:
        for line in reversed(output):
            if line.startswith("{"):
                return json.loads(line)
        return None


#: verification results of this run: (host, dest) -> result. pyinfra evaluates an operation at
#: planning and again at execution; a copy is hashed once per run.
_verified: dict[tuple[str, str], dict | None] = {}

#: model locks this run wrote on the controller, printed once more at the end of the run
LOCKS_WRITTEN: list[str] = []


def _print_locks() -> None:
    if LOCKS_WRITTEN:
        lines = "\n".join(f"    {line}" for line in LOCKS_WRITTEN)
        print(
            "\n--> Model locks written on this controller. Commit them: every rig that uses "
            f"them places exactly these bytes.\n{lines}\n",
            file=sys.stderr,
        )


atexit.register(_print_locks)


def lock_from_record(manifest: Manifest, record: dict, host_name: str) -> str:
    """The lock file text for ``manifest`` from the record of its first placement."""
    files = [{k: f[k] for k in ("path", "dest", "size", "sha256")} for f in record["files"]]
    where = record.get("endpoint") or "https://huggingface.co"
    return lockfile.lock_text(
        name=manifest.name,
        repo_id=manifest.repo_id,
        ref=manifest.ref,
        commit=record["commit"],
        files=files,
        patterns=None if manifest.files else (list(manifest.include), list(manifest.exclude)),
        origin=f"Locked on {host_name} at {record.get('placed_at', '?')}, from {where}.",
    )


def manifest_json(manifest: Manifest) -> str:
    """The manifest as the host's model tool reads it (``<etc>/model/manifests/<name>.json``)."""
    return json.dumps(manifest.to_json(), indent=1, sort_keys=True) + "\n"


def write_lock(
    state, host, dest: str, manifest: Manifest, lock_file: str, manifest_file: str
) -> bool:
    """Write the lock of ``manifest`` on the controller from the record of the copy placed at
    ``dest`` (its commit, every file's size and sha256), and the locked manifest to the host
    (``manifest_file``), as the next run puts it there. Refuses to replace a lock another host
    wrote for another commit in the meantime."""
    record = host.get_fact(JsonFile, path=f"{dest}/{layout.RECORD}")
    if not _locks_from(record):
        host.log_styled(
            f"model {manifest.name}: placed from {(record or {}).get('source', '?')}, not from "
            "a hub commit: no lock written",
            log_func=logger.info,
        )
        return True
    text = lock_from_record(manifest, record, host.name)
    target = Path(lock_file)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(f".{target.name}.writing"), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # hosts of one run write their locks in turn
        written = not target.exists()
        if not written:
            other = target.read_text(encoding="utf-8")
            if _body(other) != _body(text):
                theirs = re.search(r'^commit = "([0-9a-f]{40})"', other, re.MULTILINE)
                host.log_styled(
                    f"model {manifest.name}: {target} was written meanwhile, by another host of "
                    f"this run, for commit {theirs.group(1) if theirs else '?'}; this host placed "
                    f"commit {record['commit']} (the ref moved between them). Run again: this "
                    "host's copy is then checked against that lock",
                    fg="red",
                    log_func=logger.error,
                )
                return False
        else:
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(target)
    # the locked manifest on this host too when another host of the run wrote the same lock:
    # else the next run would put it there (a change on the second run)
    locked = load_manifest(manifest.source_file, str(target.parent))
    if not host.put_file(StringIO(manifest_json(locked)), manifest_file):
        return False
    if not written:
        return True
    total = sum(f["size"] for f in record["files"])
    line = (
        f"{target}: {manifest.repo_id} at {record['commit']} (ref {manifest.ref}), "
        f"{len(record['files'])} files, {total / 1e9:.2f} GB, placed on {host.name}"
    )
    LOCKS_WRITTEN.append(line)
    host.log_styled(
        f"model {manifest.name}: lock written: {line}", fg="green", log_func=logger.warning
    )
    return True


def _locks_from(record: dict | None) -> bool:
    """Whether a placement's record pins a hub commit (a placement from Hugging Face)."""
    return bool(record and record.get("commit") and record.get("source") == "huggingface")


def _body(text: str) -> str:
    """A lock without its comment lines (which name the host and time it was made)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


@operation()
def model_placed(
    command: str,
    dest: str,
    manifest: Manifest,
    replace_mismatched: bool,
    verify_command: str | None = None,
    lock_file: str | None = None,
    manifest_file: str = "",
):
    """Place a model at ``dest`` by running ``command`` (see :func:`fetch_argv`), unless a
    complete copy is there; write its lock on the controller when this placement locks it.

    + verify_command: when set (``model_verify_sha256``), a placed copy is also hashed file by
      file (:class:`ModelVerification`); otherwise it is checked by size, recorded sha256 and
      stray files (cheap: no hashing on every run)
    + lock_file: where the lock of an unpinned manifest goes on the controller, written from
      the record of the copy placed from Hugging Face (first-run locking); None for a manifest
      that is pinned already
    + manifest_file: the manifest's JSON on the host, rewritten locked with the lock

    A copy that does not match fails the operation, naming each file, unless
    ``replace_mismatched``: then ``command`` replaces those files (the old ones kept aside).
    """
    sizes = host.get_fact(DirectoryInventory, path=dest)
    if sizes is None:
        yield FunctionCommand(run_with_progress, (command,), {})
        if lock_file:
            yield FunctionCommand(write_lock, (dest, manifest, lock_file, manifest_file), {})
        return
    record = host.get_fact(JsonFile, path=f"{dest}/{layout.RECORD}")
    problems = placed_problems(manifest, record, sizes)
    if verify_command and not problems:
        key = (host.name, dest)
        if key not in _verified or not host.state.is_executing:
            _verified[key] = host.get_fact(ModelVerification, command=verify_command)
        verdict = _verified[key]
        if verdict is None:
            raise OperationError(
                f"model {manifest.name}: could not verify {dest} (model_verify_sha256): the model "
                f"tool did not run: `{verify_command}`"
            )
        problems = list(verdict["problems"])
    if not problems:
        if lock_file and _locks_from(record) and not Path(lock_file).exists():
            # placed by an earlier run whose lock is not on this controller
            yield FunctionCommand(write_lock, (dest, manifest, lock_file, manifest_file), {})
            return
        host.noop(f"{manifest.name}@{manifest.revision} is placed at {dest}")
        return
    for problem in problems:
        logger.warning(f"[{host.name}] model {manifest.name}: {dest}/{problem}")
    if not replace_mismatched:
        raise OperationError(
            f"model {manifest.name}: the copy at {dest} does not match its manifest"
            f"{' and lock' if manifest.lock_file else ''}: {'; '.join(problems[:10])}. It is "
            "kept as it is; set model_replace_mismatched = True to replace these files (the "
            "old ones are kept aside), then run again"
        )
    _verified.pop((host.name, dest), None)
    yield FunctionCommand(run_with_progress, (command,), {})
