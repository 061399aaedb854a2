"""rigup's on-host NVIDIA tools: the boot units' scripts, rigup-nvidia-diagnose, and the two
libraries they share with the deploy (the parsers as rigup_nvidia.py, the diagnosis library as
rigup_diagnosis.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyinfra.operations import files

from roles.nvidia.paths import DIAGNOSIS_LIBRARY, FILES, PARSERS_LIBRARY, NvidiaPaths

SCRIPTS = ("rigup-gpu-power", "rigup-nvlink", "rigup-nvidia-diagnose", "rigup-p2p-bandwidth")


@dataclass(frozen=True)
class NvidiaTools:
    """The put operations of the tools, by file name: a unit that runs a tool restarts when the
    tool or a library it imports changed (``changed("rigup-nvlink")``)."""

    ops: dict[str, Any]

    def changed(self, script: str) -> list[Any]:
        """The operations whose change means ``script`` runs different code now."""
        return [self.ops[script], self.ops["rigup_nvidia.py"], self.ops["rigup_diagnosis.py"]]


def install_tools(np: NvidiaPaths) -> NvidiaTools:
    """Plan the tools' directories, libraries and scripts on the host."""
    for path in (np.root, np.bin, np.lib, np.etc):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    ops = {
        "rigup_nvidia.py": files.put(
            name="Library rigup_nvidia.py (the deploy's parsers)",
            src=str(PARSERS_LIBRARY),
            dest=f"{np.lib}/rigup_nvidia.py",
            mode="644",
        ),
        "rigup_diagnosis.py": files.put(
            name="Library rigup_diagnosis.py (the deploy's diagnoses)",
            src=str(DIAGNOSIS_LIBRARY),
            dest=f"{np.lib}/rigup_diagnosis.py",
            mode="644",
        ),
    }
    for name in SCRIPTS:
        ops[name] = files.put(
            name=f"Script {name}", src=str(FILES / name), dest=f"{np.bin}/{name}", mode="755"
        )
    return NvidiaTools(ops)
