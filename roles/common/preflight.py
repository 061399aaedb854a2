"""Host preflight: refuse a host rigup cannot converge, before any change, with a clear reason."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.api.exceptions import DeployError

#: Distributions the roles are written for: Ubuntu 26.04 (the rig) and Debian 13 (the lab).
SUPPORTED_IDS = ("ubuntu", "debian")


class HostBasics(FactBase):
    """``{"id": "ubuntu", "version_id": "26.04", "systemd": True, "uid": 0}`` from os-release,
    ``/run/systemd/system`` (systemd is PID 1) and ``id -u``."""

    def command(self) -> str:
        return (
            '(. /etc/os-release 2>/dev/null; echo "id=${ID:-}"; echo "version_id=${VERSION_ID:-}"); '
            "if test -d /run/systemd/system; then echo systemd=1; else echo systemd=0; fi; "
            "echo uid=$(id -u)"
        )

    def process(self, output: list[str]) -> dict:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "id": values.get("id", ""),
            "version_id": values.get("version_id", ""),
            "systemd": values.get("systemd") == "1",
            "uid": int(values.get("uid", "-1") or -1),
        }


def require_supported_host() -> None:
    """Raise ``DeployError`` unless the host is Debian/Ubuntu, booted with systemd, as root.

    (pyinfra's ``--sudo`` makes commands run as root; the check reads the effective uid.)
    """
    basics = host.get_fact(HostBasics)
    problems = []
    if basics["id"] not in SUPPORTED_IDS:
        problems.append(f"distribution {basics['id'] or 'unknown'!r} is not Ubuntu or Debian")
    if not basics["systemd"]:
        problems.append("systemd is not running as PID 1 (no /run/systemd/system)")
    if basics["uid"] != 0:
        problems.append(
            f"commands run as uid {basics['uid']}, not root: connect as root or add --sudo"
        )
    if problems:
        raise DeployError(
            f"host {host.name} cannot be converged (nothing was changed): " + "; ".join(problems)
        )
