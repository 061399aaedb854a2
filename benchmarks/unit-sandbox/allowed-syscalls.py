#!/usr/bin/env python3
"""Write the system calls that rigup's units allow, by name, one file per unit kind, from the
host's own systemd (`systemd-analyze syscall-filter`, groups expanded):

  syscalls-service.txt  vllm/comfyui/voxcpm: SystemCallFilter=@system-service ~@privileged
  syscalls-boot.txt     rigup-gpu-power/-nvlink: @system-service ~@privileged @resources

Run on a host with the systemd rigup targets (the lab: Debian 13, systemd 257), from this
directory: `python3 allowed-syscalls.py`. unit-sandbox-gpu.sh reads the files.
"""

import subprocess
from pathlib import Path

text = subprocess.run(
    ["systemd-analyze", "syscall-filter", "--no-pager"], capture_output=True, text=True, check=True
).stdout
groups: dict[str, list[str]] = {}
current = None
for line in text.splitlines():
    if line.startswith("@"):
        current = line.split()[0]
        groups[current] = []
    elif current and line.strip() and not line.strip().startswith("#"):
        groups[current].append(line.split()[0])


def expand(name: str) -> set[str]:
    out: set[str] = set()
    for item in groups[name]:
        out |= expand(item) if item.startswith("@") else {item}
    return out


version = subprocess.run(["systemctl", "--version"], capture_output=True, text=True).stdout
head = f"# {version.splitlines()[0]}: written by allowed-syscalls.py\n"
service = expand("@system-service") - expand("@privileged")
boot = service - expand("@resources")
here = Path(__file__).resolve().parent
(here / "syscalls-service.txt").write_text(head + "\n".join(sorted(service)) + "\n")
(here / "syscalls-boot.txt").write_text(head + "\n".join(sorted(boot)) + "\n")
print(f"service: {len(service)} system calls, boot: {len(boot)}")
