"""doctor: rigup-doctor, rigup-bench and rigup-report on the host.

+ ``rigup-doctor`` (read-only, seconds, ``--json``, exit 0 ok / 1 warn / 2 fail): driver, GPUs,
  Xid events, NVLink, each GPU mode's services and their journal, vLLM's /metrics over a window,
  free disk, venvs against their locks, and on a rig of a cluster its supervisor and its peers
  (the cluster section); every verdict from rigup's diagnosis table
  (rigup/diagnosis).
+ ``rigup-bench``: the seed's rows with vLLM's own ``vllm bench serve`` against vllm.service,
  /metrics deltas, GPU readings, a prefix-cache self-test, A/B arms through a temporary drop-in
  (restored and verified), a JSON record per run under ``<state>/bench``; ``--media`` in the
  media mode: FLUX.2 and LTX-2.3 rows through ComfyUI (rigup/bench/media.py; the workflows are
  the ComfyUI role's, doctor.json's ``media`` key names them and ComfyUI's URL).
+ ``rigup-report``: a paste-ready Markdown post (English and 中文), host names, addresses,
  serials, UUIDs and tokens redacted.

Settings: ``doctor_*`` and ``bench_*`` (rules in roles/doctor/settings.py). The host's facts the
tools need are rendered into ``<etc>/doctor/doctor.json`` (roles/doctor/config.py), each arm's
drop-in into ``<etc>/doctor/arms/``; an arm that changes vLLM flags is checked by vLLM's own
parser at converge, like the service's own flags.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import FindFiles

from roles.cluster.inventory import this_member
from roles.common.facts import AllowedCpus
from roles.common.libraries import host_package
from roles.common.operations import check_passes, fingerprint
from roles.common.paths import LINK_DIR, Layout
from roles.common.placed import (
    directory_placed,
    file_absent,
    file_placed,
    link_placed,
    survey,
)
from roles.doctor.config import arm_files, doctor_config
from roles.doctor.paths import COMMANDS, FILES, DoctorPaths
from roles.doctor.settings import arm_problems
from roles.model import PlacedModel
from roles.vllm import LOCKS
from roles.vllm.cpu import parse_cpu_list
from roles.vllm.paths import VllmPaths


def model_record(llm: PlacedModel) -> dict[str, str]:
    """What the report says about the served checkpoint: name, revision, repo_id, state and
    description. The commit it is pinned to is read on the host from the placed record
    (rigup/report.py), not rendered here: a first converge writes the model's lock while it
    runs, after this file was planned, so a commit here would change the file on the next run."""
    m = llm.manifest
    return {
        "name": llm.name,
        "revision": llm.revision,
        "repo_id": m.repo_id,
        "state": m.state,
        "description": m.description,
    }


@deploy("Doctor")
def doctor(settings, llm: PlacedModel) -> None:
    """Install the three commands, the package rigup they run (rigup/doctor, rigup/bench,
    rigup/report.py), ``doctor.json`` and the benchmark arms for
    the LLM ``llm`` (what roles.model.model returned in this run)."""
    dp = DoctorPaths.from_data(settings)
    cpus = (
        parse_cpu_list(host.get_fact(AllowedCpus) or "0")
        if settings.get("vllm_device") == "cpu"
        else []
    )
    survey(
        [
            *(dp.root, dp.bin, dp.lib, dp.etc, dp.arms, dp.results, dp.config),
            *(f"{dp.bin}/{name}" for name in COMMANDS),
            *(f"{LINK_DIR}/{name}" for name in COMMANDS),
        ]
    )
    for path in (dp.root, dp.bin, dp.lib, dp.etc, dp.arms, dp.results):
        directory_placed(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    host_package(dp.lib)
    for name in COMMANDS:
        file_placed(
            name=f"Command {name}", src=str(FILES / name), dest=f"{dp.bin}/{name}", mode="755"
        )
        link_placed(
            name=f"{LINK_DIR}/{name} on PATH", path=f"{LINK_DIR}/{name}", target=f"{dp.bin}/{name}"
        )
    # a rig of a cluster: its place in it, for the cluster section (None when it serves alone)
    config = doctor_config(settings, llm.path, model_record(llm), cpus, this_member(settings))
    file_placed(
        name="doctor.json (what the doctor, the benchmark and the report know of this host)",
        src=StringIO(json.dumps(config, indent=1) + "\n"),
        dest=dp.config,
        mode="644",
    )
    wanted: set[str] = set()
    checked = []
    arms = [
        (name, suffix, text)
        for name, arm in settings.get("bench_arms").items()
        if not arm_problems(settings, arm)  # else rigup-bench says why (doctor.json)
        for suffix, text in arm_files(settings, name, arm, llm.path, cpus).items()
    ]
    survey(f"{dp.arms}/{name}{suffix}" for name, suffix, _ in arms)
    for name, suffix, text in arms:
        wanted.add(f"{name}{suffix}")
        file_placed(
            name=f"Bench arm {name}{suffix}",
            src=StringIO(text),
            dest=f"{dp.arms}/{name}{suffix}",
            mode="644",
        )
        if suffix == ".json":
            checked.append((name, text))
    for path in host.get_fact(FindFiles, path=dp.arms, quote_path=True) or []:
        if Path(path).name not in wanted:
            file_absent(name=f"Remove the old bench arm file {path}", path=path)
    if checked:
        vp = VllmPaths.from_data(settings)
        commands = " && ".join(
            f"{shlex.quote(vp.python)} {shlex.quote(vp.bin)}/check_args.py "
            f"{shlex.quote(f'{dp.arms}/{name}.json')}"
            for name, _ in checked
        )
        lock = LOCKS[settings.get("vllm_device")]
        check_passes(
            name="Check the bench arms' serve arguments with vLLM's own parser",
            command=commands,
            stamp=f"{Layout.from_data(settings).checks}/bench-arms.ok",
            key=fingerprint(checked, hashlib.sha256(lock.read_bytes()).hexdigest()),
            what="bench arms' argument check",
        )
