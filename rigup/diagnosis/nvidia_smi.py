"""Signatures of what nvidia-smi prints and its exit statuses, and :func:`classify_nvidia_smi`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .core import FAIL, WARN, Signature, Verdict, by_id, classify_exit, classify_lines, verdict
from .gpu_reset import RESET_ORDER

_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"

#: Where to look and what to do about a GPU the driver cannot reach (Xid 79, exit 15).
LOST_GPU_FIX = (
    "read the kernel log (`journalctl -k | grep -iE 'xid|fallen off the bus'`): Xid 79 'GPU has "
    "fallen off the bus' confirms it. Check the riser cable and its seating, the PCIe power "
    "cables and the power supply (3090s draw short spikes well above their limit), reseat the "
    "card, then power the machine off at the wall for a minute (a cold power cycle): a warm "
    "reboot usually does not bring a lost GPU back"
)

DIAGNOSE = "/opt/rigup/nvidia/bin/rigup-nvidia-diagnose"


def _gpu_label(f: dict[str, Any]) -> dict[str, str]:
    index, bus = f.get("index"), f.get("bus")
    if bus and index:
        return {"gpu": f"GPU {index} at {bus}"}
    if bus:
        return {"gpu": f"the GPU at {bus}"}
    return {"gpu": "a GPU"}


_NVIDIA_SMI: list[Signature] = [
    Signature(
        id="gpu-unreachable/permissions",
        source="nvidia-smi",
        severity=FAIL,
        what="nvidia-smi may not open {gpu}",
        why="Insufficient Permissions: the /dev/nvidia* device files are not accessible",
        fix="run it as root (rigup's units do), or check the device files' group",
        pattern=rf"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<index>\d+)?:?\s*(?P<bus>{_BUS}).*Insufficient Permissions",
        exit_codes=(4,),
        derive=_gpu_label,
        reference="nvidia-smi(1) RETURN VALUE 4",
    ),
    Signature(
        id="gpu-lost",
        source="nvidia-smi",
        severity=FAIL,
        what="{gpu} unreachable",
        why="the driver cannot reach it ({reason}): it fell off the PCIe bus or lost power",
        fix=LOST_GPU_FIX,
        pattern=rf"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<index>\d+)?:?\s*(?P<bus>{_BUS})\s*:?\s*(?P<reason>.*?)\.?$",
        exit_codes=(15,),
        derive=lambda f: {**_gpu_label(f), "reason": f.get("reason") or "nvidia-smi exit 15"},
        reference="owners' reports (riser, power); nvidia-smi(1) RETURN VALUE 15: GPU has "
        "fallen off the bus or has otherwise become inaccessible",
    ),
    Signature(
        id="driver-not-loaded",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA kernel module is not loaded",
        why="nvidia-smi could not communicate with the NVIDIA driver",
        fix=f"{DIAGNOSE} finds the cause (not installed for this kernel, blocked by Secure "
        "Boot, nouveau bound, DKMS build failed) and its fix",
        pattern=r"couldn't communicate with the NVIDIA driver|NVML: Driver Not Loaded",
        exit_codes=(9,),
        reference="nvidia-smi: 'NVIDIA-SMI has failed because it couldn't communicate with the "
        "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.' "
        "(exit 9)",
    ),
    Signature(
        id="driver-library-mismatch",
        source="nvidia-smi",
        severity=FAIL,
        what="the loaded NVIDIA kernel module and the userspace libraries differ",
        why="'Driver/library version mismatch': an upgrade replaced the libraries{library} under "
        "the running module",
        fix="reboot to load the module that matches the libraries; rigup holds the driver "
        "packages so that it does not recur",
        pattern=r"Driver/library version mismatch",
        context={"library_version": r"NVML library version:\s*([\d.]+)"},
        derive=lambda f: {
            "library": f" ({f['library_version']})" if f.get("library_version") else ""
        },
        exit_codes=(18,),
        reboot_fixes=True,
        reference="nvidia-smi: 'Failed to initialize NVML: Driver/library version mismatch'",
    ),
    Signature(
        id="no-gpus",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA driver lists no GPU",
        why="'No devices were found': the driver is loaded but no GPU is usable (or the GPU "
        "asked for does not exist)",
        fix="`lspci -d 10de:` shows whether the cards are on the PCIe bus; `journalctl -k | grep "
        "-i nvrm` shows why the driver dropped them",
        pattern=r"^No devices were found",
        exit_codes=(6,),
        reference="captured on the 2x H200 machine (tests/fixtures/h200x2/query-errors.txt), exit 6",
    ),
    Signature(
        id="nvml-missing",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA management library (libnvidia-ml.so.1) is missing",
        why="NVML could not be loaded: the driver's userspace packages are incomplete",
        fix="converge with deploys/nvidia.py (it reinstalls the driver packages)",
        pattern=r"NVML Shared Library Not Found|libnvidia-ml\.so\.1: cannot open",
        exit_codes=(12,),
        reference="nvidia-smi(1) RETURN VALUE 12",
    ),
    Signature(
        id="nvml-failed",
        source="nvidia-smi",
        severity=FAIL,
        what="NVML could not initialise",
        why="'Failed to initialize NVML: {error}'",
        fix=f"run {DIAGNOSE}; inside a container this is the device cgroup (the container "
        "was not given the GPUs)",
        pattern=r"Failed to initialize NVML: (?P<error>.*)",
    ),
    Signature(
        id="query-field-unknown",
        source="nvidia-smi",
        severity=FAIL,
        what="this nvidia-smi does not know the field '{field}'",
        why="the installed driver is older than the one rigup queries (580 or newer)",
        fix="converge with deploys/nvidia.py to install nvidia_driver_branch",
        pattern=r'Field "(?P<field>[^"]+)" is not a valid field to query',
        reference="captured on the 2x H200 machine (tests/fixtures/h200x2/query-errors.txt), exit 2",
    ),
    Signature(
        id="option-unknown",
        source="nvidia-smi",
        severity=FAIL,
        what="this nvidia-smi does not know the option '{option}'",
        why="the installed driver's nvidia-smi has another command line than rigup expects",
        fix="converge with deploys/nvidia.py to install nvidia_driver_branch",
        pattern=r"Option (?P<option>\S+) is not recognized",
        reference="captured on the 2x H200 machine (tests/fixtures/h200x2/query-errors.txt), exit 255",
    ),
    Signature(
        id="inforom-corrupted",
        source="nvidia-smi",
        severity=WARN,
        what="the infoROM of {gpu} is corrupted",
        why="the board's configuration ROM fails its checksum; the GPU may still work",
        fix="watch it: if the GPU also shows Xid errors, have the card serviced",
        pattern=rf"infoROM is corrupted at gpu (?P<bus>{_BUS})",
        derive=_gpu_label,
        exit_codes=(14,),
        reference="nvidia-smi: 'WARNING: infoROM is corrupted at gpu ...'; RETURN VALUE 14",
    ),
    Signature(
        id="power-cables",
        source="nvidia-smi",
        severity=FAIL,
        what="a GPU's external power cables are not properly attached",
        why="nvidia-smi exit {exit_code}",
        fix="power off, seat both PCIe power connectors of each card (no daisy-chained pigtail "
        "for a 3090), boot",
        exit_codes=(8,),
        reference="nvidia-smi(1) RETURN VALUE 8",
    ),
    Signature(
        id="gpu-interrupt",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA kernel module detected an interrupt issue with a GPU",
        why="nvidia-smi exit {exit_code}",
        fix="read `journalctl -k | grep -i nvrm`; reboot; if it repeats, try the card in another "
        "slot",
        exit_codes=(10,),
        reference="nvidia-smi(1) RETURN VALUE 10",
    ),
    Signature(
        id="nvidia-smi-missing",
        source="nvidia-smi",
        severity=FAIL,
        what="nvidia-smi is not installed",
        why="the NVIDIA driver's userspace tools are missing",
        fix=f"converge with deploys/nvidia.py; {DIAGNOSE} tells whether the driver is there",
        pattern=r"nvidia-smi: (?:command )?not found",
        exit_codes=(127,),
        reference="sh: 'nvidia-smi: not found', exit 127",
    ),
    Signature(
        id="gpu-reset-refused/in-use",
        source="nvidia-smi",
        severity=FAIL,
        what="nvidia-smi refused to reset the GPU at {bus}: it is in use",
        why="a client holds the device open: on a rig, nvidia-persistenced (rigup keeps "
        "persistence mode on at every boot, and its attachment counts as a client), and any "
        "process on the GPU (vLLM, ComfyUI, VoxCPM2, an X server, another nvidia-smi); "
        "`nvidia-smi --query-compute-apps=pid,process_name --format=csv` lists the processes",
        fix=RESET_ORDER,
        pattern=rf"GPU (?P<bus>{_BUS}):? (?:In use by another client|is currently in use by "
        r"another process)",
        reference="NVIDIA/NVSentinel#1690 and PR #1692 ('In use by another client', exit 255; "
        "nvidia-smi -pm 0 then -r succeeds); NVIDIA/gpu-operator#118 (nvidia-persistenced keeps "
        "a handle on the GPU)",
    ),
    Signature(
        id="nvidia-smi-failed",
        source="nvidia-smi",
        severity=FAIL,
        what="nvidia-smi failed",
        why="exit {exit_code}: an error rigup does not recognise",
        fix=f"run {DIAGNOSE} and `nvidia-smi` by hand",
        exit_codes=(2, 3, 13, 255),
        reference="nvidia-smi(1) RETURN VALUE 2 (invalid argument), 3 (not available), 13 (not "
        "implemented), 255 (other)",
    ),
]


def classify_nvidia_smi(
    lines: Iterable[str], exit_code: int | None
) -> tuple[list[Verdict], list[str]]:
    """Name what nvidia-smi printed besides its data rows (``lines``: the lines the caller could
    not read as data) and its exit status. Never raises.

    Every recognised line gives its verdict (a lost GPU names its index and bus); an exit status
    no line explains adds the status's own verdict; lines nothing recognises are returned, and
    with a non-zero status they become the evidence of a generic failure.
    """
    text = "\n".join(lines)
    verdicts, unrecognised = classify_lines("nvidia-smi", text)
    explained = any(
        v.severity == FAIL or exit_code in by_id(v.id, "nvidia-smi").exit_codes for v in verdicts
    )
    if exit_code and not explained:
        by_exit = classify_exit("nvidia-smi", exit_code, unrecognised)
        if by_exit is None:
            by_exit = verdict(
                by_id("nvidia-smi-failed"), {"exit_code": exit_code}, tuple(unrecognised)
            )
        if unrecognised and by_exit.id == "nvidia-smi-failed":
            by_exit = Verdict(**{**by_exit.__dict__, "why": f"exit {exit_code}: {unrecognised[0]}"})
        verdicts.append(by_exit)
        unrecognised = []
    return verdicts, unrecognised
