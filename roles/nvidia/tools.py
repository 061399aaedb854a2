"""rigup's on-host NVIDIA tools: the boot units' scripts, rigup-nvidia-diagnose, and the package
they share with the deploy (rigup: its nvidia-smi readers rigup.nvidia, its diagnosis table
rigup.diagnosis)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.libraries import PACKAGE_NAME, host_package
from roles.common.placed import directory_placed, file_placed, survey
from roles.nvidia.paths import FILES, NvidiaPaths

SCRIPTS = ("rigup-gpu-power", "rigup-nvlink", "rigup-nvidia-diagnose", "rigup-p2p-bandwidth")


@dataclass(frozen=True)
class NvidiaTools:
    """The put operations of the tools, by file name: a unit that runs a tool restarts when the
    tool or the package it imports changed (``changed("rigup-nvlink")``)."""

    ops: dict[str, Any]

    def changed(self, script: str) -> list[Any]:
        """The operations whose change means ``script`` runs different code now."""
        return [self.ops[script], self.ops[PACKAGE_NAME]]


def install_tools(np: NvidiaPaths) -> NvidiaTools:
    """Plan the tools' directories, package and scripts on the host."""
    survey([np.root, np.bin, np.lib, np.etc, *(f"{np.bin}/{name}" for name in SCRIPTS)])
    for path in (np.root, np.bin, np.lib, np.etc):
        directory_placed(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    ops = {PACKAGE_NAME: host_package(np.lib)}
    for name in SCRIPTS:
        ops[name] = file_placed(
            name=f"Script {name}", src=str(FILES / name), dest=f"{np.bin}/{name}", mode="755"
        )
    return NvidiaTools(ops)
