"""rigup's own code on the rig: one package, standard library only, installed by the deploy as
``<tool tree>/lib/rigup`` (roles/common/libraries.py) and imported by the deploy under the same
name from the repository root.

+ diagnosis/  the one table of signatures: what a fault's output means, why, and the fix
+ nvidia/     readers of nvidia-smi and the driver's state (power, NVLink, topology, P2P)
+ units.py    systemd units as the tools read them (``systemctl show``, the journal)
+ metrics.py  vLLM's /metrics read into figures
+ doctor/     rigup-doctor's checks
+ bench/      rigup-bench: vLLM's own ``vllm bench serve`` rows, arms, roofline
+ report.py   rigup-report: the rig as a paste-ready post, redacted

The scripts that run it are in files/<component>/ (rigup-doctor, rigup-nvlink, rigup-explain,
...); each puts its tree's ``lib`` first on ``sys.path`` (one line) and imports ``rigup``.
"""
