"""Operations of the model role: placing a model, holding a secret file."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

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
