"""rigup's on-host NVIDIA tools: the boot units' scripts, rigup-nvidia-diagnose, and the two
libraries they share with the deploy (the parsers as rigup_nvidia, the diagnosis library as the
package rigup_diagnosis)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.libraries import host_library
from roles.common.placed import directory_placed, file_placed, survey, survey_tree
from roles.nvidia.paths import DIAGNOSIS_LIBRARY, FILES, PARSERS_LIBRARY, NvidiaPaths

SCRIPTS = ("rigup-gpu-power", "rigup-nvlink", "rigup-nvidia-diagnose", "rigup-p2p-bandwidth")


@dataclass(frozen=True)
class NvidiaTools:
    """The put operations of the tools, by file name: a unit that runs a tool restarts when the
    tool or a library it imports changed (``changed("rigup-nvlink")``)."""

    ops: dict[str, Any]

    def changed(self, script: str) -> list[Any]:
        """The operations whose change means ``script`` runs different code now."""
        return [self.ops[script], self.ops["rigup_nvidia"], self.ops["rigup_diagnosis"]]


def install_tools(np: NvidiaPaths) -> NvidiaTools:
    """Plan the tools' directories, libraries and scripts on the host."""
    survey([np.root, np.bin, np.lib, np.etc, *(f"{np.bin}/{name}" for name in SCRIPTS)])
    for path in (np.root, np.bin, np.lib, np.etc):
        directory_placed(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    survey_tree(np.lib)  # the tools' libraries only: one round trip for all of them
    ops = {
        "rigup_nvidia": host_library(
            "rigup_nvidia", PARSERS_LIBRARY, np.lib, "the deploy's parsers"
        ),
        "rigup_diagnosis": host_library(
            "rigup_diagnosis", DIAGNOSIS_LIBRARY, np.lib, "the deploy's diagnoses"
        ),
    }
    for name in SCRIPTS:
        ops[name] = file_placed(
            name=f"Script {name}", src=str(FILES / name), dest=f"{np.bin}/{name}", mode="755"
        )
    return NvidiaTools(ops)
