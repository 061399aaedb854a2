"""The flags that move vLLM's memory accounting (roles/vllm/memory_flags.py) against the pinned
vLLM's own parser: every flag of its CacheConfig and OffloadConfig argument groups is managed by
a setting, refused in vllm_extra_args with a reason, or named as moving no memory. A vLLM bump
that adds a flag there fails here until it is sorted.

    RIGUP_VLLM_PYTHON=/var/tmp/vllm-venv/bin/python .venv/bin/pytest tests/vllm/test_memory_flags.py
    RIGUP_VLLM_ON_LAB=1 ...   # the venv rigup deployed on the lab machine (as test_pinned_vllm)
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from roles.vllm.memory_flags import MEMORY_FLAGS, MEMORY_GROUPS, NOT_MEMORY
from roles.vllm.settings import MANAGED

ON_LAB = os.environ.get("RIGUP_VLLM_ON_LAB") == "1"
VLLM_PYTHON = (
    "/opt/rigup/vllm/venv/bin/python" if ON_LAB else os.environ.get("RIGUP_VLLM_PYTHON", "")
)

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON,
    reason="no pinned vLLM to run: set RIGUP_VLLM_PYTHON to a python with it, or "
    "RIGUP_VLLM_ON_LAB=1 for a converged lab machine",
)

#: the long flags of each argument group of vLLM's engine arguments, as JSON. Building the parser
#: instantiates DeviceConfig, which raises where vLLM detects no accelerator (the CUDA build in CI):
#: the CPU platform stands in there, as files/vllm/check_args.py explains and does.
PROBE = """
import json, sys
from vllm import platforms
if platforms.current_platform.is_unspecified():
    from vllm.platforms.cpu import CpuPlatform
    platforms.current_platform = CpuPlatform()
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
groups = {}
for group in parser._action_groups:
    flags = [o for a in group._group_actions for o in a.option_strings
             if o.startswith("--") and not o.startswith("--no-")]
    groups.setdefault(group.title, []).extend(flags)
print(json.dumps({t: groups.get(t, []) for t in sys.argv[1:]}))
"""


@pytest.fixture(scope="module")
def groups() -> dict[str, list[str]]:
    out = subprocess.run(
        [VLLM_PYTHON, "-c", PROBE, *MEMORY_GROUPS],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_flag_of_the_memory_groups_is_managed_refused_or_not_memory(groups):
    flags = {flag for title in MEMORY_GROUPS for flag in groups[title]}
    assert flags, groups  # the groups exist under these titles
    unsorted = flags - set(MANAGED) - set(MEMORY_FLAGS) - set(NOT_MEMORY)
    assert not unsorted, f"sort these into MEMORY_FLAGS or NOT_MEMORY: {sorted(unsorted)}"
    gone = (set(MEMORY_FLAGS) | set(NOT_MEMORY)) - flags
    assert not gone, f"not in the pinned vLLM's memory groups any more: {sorted(gone)}"
    assert "--kv-cache-memory-bytes" in flags and "--cpu-offload-gb" in flags
