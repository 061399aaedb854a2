"""The doctor deploy (as deploys/doctor.py), then the content of the doctor.json it plans,
written to ``$RIGUP_PLAN_OUT`` (plan tests only: the --json plan names operations, not what an
upload carries)."""

import os

from pyinfra import host, state
from pyinfra.api.command import FileUploadCommand

from roles.doctor import doctor
from roles.model import model, model_store
from roles.settings import host_settings

settings = host_settings()
doctor(settings, model(settings, model_store(settings)))

for op_hash, data in state.ops[host].items():
    if any("doctor.json" in n for n in state.get_op_meta(op_hash).names):
        for command in data.command_generator():
            if isinstance(command, FileUploadCommand) and command.dest.endswith("doctor.json"):
                with open(os.environ["RIGUP_PLAN_OUT"], "w", encoding="utf-8") as out:
                    out.write(command.src.getvalue())
