"""Operations of the model role: placing a model, holding a secret file."""

from __future__ import annotations

import hashlib
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.facts.files import Sha256File

from roles.common.facts import DirectoryInventory, JsonFile
from roles.model.commands import model_fetch, placed_mismatches
from roles.model.manifest import Manifest


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
