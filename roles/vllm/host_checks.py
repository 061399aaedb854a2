"""The three on-host checks of the vLLM deploy, as pure functions of what they check: the
checkpoint preflight (vLLM's model registry), the serve arguments (vLLM's own parser), and the
text-only serving (vLLM's config code). Each runs on the host before the service changes, as the
service's user where it must see what the service sees, and again only when its key (inputs,
scripts, venv) or a watched file changes (roles.common.operations.check_passes)."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roles.common.operations import fingerprint
from roles.model import PLACEMENT_RECORD
from roles.vllm.paths import VllmPaths

REPO = Path(__file__).resolve().parents[2]
#: on-host scripts: name -> source (modules, not commands, are installed 0644: :data:`MODULES`)
SCRIPTS = {
    "vllm_cli.py": REPO / "files" / "vllm" / "vllm_cli.py",
    "check_args.py": REPO / "files" / "vllm" / "check_args.py",
    "text_only_check.py": REPO / "files" / "vllm" / "text_only_check.py",
    "vllm_offline.py": REPO / "files" / "vllm" / "vllm_offline.py",
    "vllm_names.py": REPO / "files" / "vllm" / "vllm_names.py",
    "checkpoint_preflight.py": REPO / "files" / "model" / "checkpoint_preflight.py",
    "checkpoint_quant.py": REPO / "files" / "model" / "checkpoint_quant.py",
}
#: the SCRIPTS that are modules (imported by the others, not run), installed 0644
MODULES = ("vllm_offline.py", "checkpoint_quant.py", "vllm_names.py")


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file at ``path`` (a check's key changes with its script)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class CheckFacts:
    """What every check reads: ``paths`` (the vLLM role's), ``as_user`` (the ``runuser`` prefix
    of the service's user with the hubs offline: roles.common.service.GpuService.as_user), the
    placed checkpoint ``model_dir``, ``method`` (``vllm_text_only_method``) and ``venv_key``
    (the lock's hash and the Python: a rebuilt venv checks again)."""

    paths: VllmPaths
    as_user: str
    model_dir: str
    method: str
    venv_key: tuple[str, Any]

    @property
    def placed(self) -> tuple[str, str]:
        """The placed model's record and config.json: a model placed again (by this run, or by
        a transfer an interrupted run left behind) is checked again."""
        return (f"{self.model_dir}/{PLACEMENT_RECORD}", f"{self.model_dir}/config.json")


@dataclass(frozen=True)
class HostCheck:
    """One on-host check: its operation's ``name``, the shell ``command`` that must exit 0, the
    ``stamp`` file's name (under rigup's checks directory), its ``key``, ``what`` it is called
    in messages, and the files whose change runs it again (``watch``)."""

    name: str
    command: str
    stamp: str
    key: str
    what: str
    watch: tuple[str, ...]

    def arguments(self, checks_dir: str) -> dict[str, Any]:
        """The keyword arguments of roles.common.service.GpuService.check, the stamp under
        ``checks_dir``."""
        return {
            "name": self.name,
            "command": self.command,
            "stamp": f"{checks_dir}/{self.stamp}",
            "key": self.key,
            "what": self.what,
            "watch": self.watch,
        }


def checkpoint_preflight(facts: CheckFacts, speculative: dict | None) -> HostCheck:
    """files/model/checkpoint_preflight.py on the placed checkpoint with vLLM's model registry
    (shards, lm_head, vision, weight names, the MTP head when ``speculative`` asks for it, fused
    layers' quantization), as the service's user."""
    p, model = facts.paths, shlex.quote(facts.model_dir)
    drafter = f" --speculative-method {shlex.quote(speculative['method'])}" if speculative else ""
    return HostCheck(
        name="Checkpoint preflight with vLLM's model registry (shards, lm_head, vision, weight "
        "names, MTP head, fused layers' quantization)",
        command=(
            f"{facts.as_user} {p.python} {p.bin}/checkpoint_preflight.py {model} "
            f"--method {facts.method}{drafter}"
        ),
        stamp="checkpoint-preflight.ok",
        key=fingerprint(
            facts.model_dir,
            facts.method,
            speculative,
            facts.venv_key,
            sha256_of(SCRIPTS["checkpoint_preflight.py"]),
            sha256_of(SCRIPTS["checkpoint_quant.py"]),
        ),
        what="checkpoint preflight",
        watch=facts.placed,
    )


def args_check(facts: CheckFacts, args: list[str], managed: dict) -> HostCheck:
    """files/vllm/check_args.py: the ``vllm serve`` arguments ``args`` through vLLM's own parser
    with the placed model, and ``managed`` (roles.vllm.managed_check: no extra flag sets a
    managed value), both read from a temporary directory removed after."""
    p = facts.paths
    return HostCheck(
        name="Check the serve arguments with vLLM's own parser and the placed model",
        command=(
            "d=$(mktemp -d) && "
            f"printf '%s' {shlex.quote(json.dumps(args))} > $d/argv.json && "
            f"printf '%s' {shlex.quote(json.dumps(managed))} > $d/managed.json && "
            f"{p.python} {p.bin}/check_args.py $d/argv.json --with-model "
            "--managed $d/managed.json; rc=$?; rm -rf $d; exit $rc"
        ),
        stamp="vllm-args.ok",
        key=fingerprint(
            args,
            managed,
            facts.model_dir,
            facts.venv_key,
            sha256_of(SCRIPTS["check_args.py"]),
            sha256_of(SCRIPTS["vllm_names.py"]),
            sha256_of(SCRIPTS["vllm_offline.py"]),
        ),
        what="vLLM argument check",
        watch=facts.placed,
    )


def text_only_check(facts: CheckFacts) -> HostCheck:
    """files/vllm/text_only_check.py: vLLM's config code serves the checkpoint text-only by
    ``method``, as the service's user."""
    p, model = facts.paths, shlex.quote(facts.model_dir)
    return HostCheck(
        name=f"Check the checkpoint is served text-only ({facts.method}) with vLLM's config code",
        command=(
            f"{facts.as_user} {p.python} {p.bin}/text_only_check.py {model} --method {facts.method}"
        ),
        stamp="text-only.ok",
        key=fingerprint(
            facts.model_dir,
            facts.method,
            facts.venv_key,
            sha256_of(SCRIPTS["text_only_check.py"]),
            sha256_of(SCRIPTS["vllm_offline.py"]),
        ),
        what="text-only check",
        watch=facts.placed,
    )
