"""The rig: one Ubuntu 26.04 box with two RTX 3090s (NVLink bridge).

Edit the defaults below or set the environment variables, then run (after bin/bootstrap)
    .venv/bin/pyinfra inventory/rig.py deploys/full.py        (add --sudo for a non-root user)
Settings (versions, flags, paths) live in inventory/group_data/all.py; anything set here for the
host overrides them for this host only.

  RIGUP_RIG_HOST  SSH host name or address of the rig, or @local to converge this machine itself
  RIGUP_RIG_USER  SSH user (root, or a sudoer together with pyinfra's --sudo)
  RIGUP_RIG_PORT  SSH port
  RIGUP_RIG_KEY   private key file (default: your SSH agent / ~/.ssh config)
"""

import os
import sys

_host = os.environ.get("RIGUP_RIG_HOST", "rig.local")
if "RIGUP_RIG_HOST" not in os.environ:
    print(
        "inventory/rig.py: RIGUP_RIG_HOST is not set, so the rig is 'rig.local'; set it (host, "
        "address or @local) or edit inventory/rig.py",
        file=sys.stderr,
    )
_data = {"nvidia_gpu_count": 2}  # two RTX 3090s; rigup checks this against the PCI bus

if not _host.startswith("@"):
    _data.update(
        ssh_user=os.environ.get("RIGUP_RIG_USER", "root"),
        ssh_port=int(os.environ.get("RIGUP_RIG_PORT", "22")),
    )
    if os.environ.get("RIGUP_RIG_KEY"):
        _data["ssh_key"] = os.environ["RIGUP_RIG_KEY"]

rig = [(_host, _data)]
