"""The driver and kernel state: /proc's driver version, Secure Boot, DKMS, the state the
NVIDIA layer reads in one command (:data:`DRIVER_STATE_COMMAND`) and its diagnosis."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rigup import diagnosis

_NVRM = re.compile(r"NVRM version: (.*?Kernel Module.*?)\s+(\d+\.\d+(?:\.\d+)?)\s")


def parse_proc_driver_version(text: str) -> tuple[str, bool] | None:
    """``/proc/driver/nvidia/version`` -> ``("580.159.04", open_module)``; None if not loaded."""
    m = _NVRM.search(text)
    if not m:
        return None
    return m.group(2), "Open Kernel Module" in m.group(1)


def parse_secure_boot(text: str) -> bool | None:
    """Whether ``mokutil --sb-state`` (its whole output) says Secure Boot is ENFORCED: True,
    False (disabled, validation disabled in shim, setup mode, no EFI, not supported), None
    (unknown). The diagnosis library's :func:`secure_boot` says why."""
    return diagnosis.secure_boot(text).enforced


@dataclass(frozen=True)
class DkmsEntry:
    """One ``dkms status`` line: module/version, kernel, state (``installed``, ``built``...)."""

    module: str
    version: str
    kernel: str
    state: str


def parse_dkms_status(text: str) -> list[DkmsEntry]:
    """Parse ``dkms status`` (``nvidia/580.178.04, 7.0.0-44-generic, x86_64: installed``).

    Lines without a kernel (``nvidia/580.178.04: added``) give an entry with kernel "".
    """
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if ":" not in line or "/" not in line.split(",")[0]:
            continue
        head, state = line.rsplit(":", 1)
        parts = [p.strip() for p in head.split(",")]
        module, _, version = parts[0].partition("/")
        kernel = parts[1] if len(parts) > 1 else ""
        words = state.split()
        entries.append(DkmsEntry(module, version, kernel, words[0] if words else ""))
    return entries


#: Lines of DKMS output (apt's term.log, make.log) worth classifying: the failure, the log it
#: names, and the usual causes (headers, compiler).
_DKMS_GREP = (
    "Bad return status|Consult .*make\\.log|kernel headers for kernel|compiler differs|"
    "kernel was built by|You are using|gcc[^ ]*: (not found|No such file)|BUILD_EXCLUSIVE"
)

#: Shell snippet that prints the driver state as ``key=value`` lines (read by
#: :func:`parse_driver_state`); run by the NvidiaDriverState fact, by rigup-nvidia-diagnose and by
#: the boot units when nvidia-smi fails. Read-only.
DRIVER_STATE_COMMAND = (
    'k=$(uname -r); echo "kernel=$k"; '
    'echo "loaded=$(cat /sys/module/nvidia/version 2>/dev/null)"; '
    'echo "installed=$(modinfo -k "$k" -F version nvidia 2>/dev/null | head -n1)"; '
    'echo "signer=$(modinfo -k "$k" -F signer nvidia 2>/dev/null | head -n1)"; '
    "for d in /lib/modules/*; do "
    'v=$(modinfo -k "${d##*/}" -F version nvidia 2>/dev/null | head -n1); '
    'test -n "$v" && echo "module_kernel=${d##*/} $v"; done; '
    "lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\\.so\\.1 .*x86-64/ {print $NF; exit}'); "
    'echo "userspace=$(test -n "$lib" && readlink -f "$lib" | sed -n \'s/.*libnvidia-ml\\.so\\.//p\')"; '
    'echo "nouveau_loaded=$(test -d /sys/module/nouveau && echo 1 || echo 0)"; '
    "echo \"nouveau_blacklisted=$(grep -rlsE '^[[:space:]]*blacklist[[:space:]]+nouveau' "
    '/etc/modprobe.d /usr/lib/modprobe.d /lib/modprobe.d | head -n1)"; '
    'echo "reboot_required=$(test -f /var/run/reboot-required && echo 1 || echo 0)"; '
    'echo "nvidia_smi=$(command -v nvidia-smi)"; '
    "mokutil --sb-state 2>&1 | sed 's/^/secure_boot=/'; "
    "mok=/var/lib/shim-signed/mok/MOK.der; test -f $mok && "
    "mokutil --test-key $mok 2>&1 | head -n1 | sed 's/^/mok=/'; "
    'echo "efi=$(test -d /sys/firmware/efi && echo 1 || echo 0)"; '
    "e=/sys/firmware/efi/efivars; g=8be4df61-93ca-11d2-aa0d-e98c0e1d93e9; "
    "echo \"sb_var=$(od -An -tu1 $e/SecureBoot-$g 2>/dev/null | awk '{print $NF}')\"; "
    "echo \"setup_var=$(od -An -tu1 $e/SetupMode-$g 2>/dev/null | awk '{print $NF}')\"; "
    'echo "moksbstate=$(test -e $e/MokSBStateRT-605dab50-e046-4300-abb6-3dd810dd8b23 && echo 1 || echo 0)"; '
    "for d in /sys/bus/pci/devices/*; do "
    'test "$(cat $d/vendor 2>/dev/null)" = 0x10de || continue; '
    'case "$(cat $d/class)" in 0x0300*|0x0302*) ;; *) continue ;; esac; '
    'drv=-; test -e $d/driver && drv=$(basename "$(readlink $d/driver)"); '
    'echo "gpu_driver=${d##*/} $drv"; done; '
    "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'linux-modules-nvidia-*' "
    "'nvidia-dkms-*' 'nvidia-open' 'nvidia-driver-*' 'cuda-keyring' 2>/dev/null "
    '| awk \'$1 == "ii" || $1 == "hi" {print "package=" $2}\'; '
    "dkms status nvidia 2>/dev/null | sed 's/^/dkms=/'; "
    "ls -d /var/lib/dkms/nvidia/*/build/make.log /var/lib/dkms/nvidia/*/*/*/log/make.log "
    "2>/dev/null | sed 's/^/dkms_log=/'; "
    f"{{ grep -hE '{_DKMS_GREP}' /var/log/apt/term.log 2>/dev/null | tail -n 20; "
    "for f in /var/lib/dkms/nvidia/*/build/make.log; do "
    f"grep -hE '{_DKMS_GREP}' \"$f\" 2>/dev/null | tail -n 10; done; }} | sed 's/^/dkms_out=/'; "
    "journalctl -k -b --no-pager -q 2>/dev/null "
    "| grep -E 'NVRM|nvidia|Lockdown|fallen off the bus|GSP' | tail -n 60 | sed 's/^/klog=/'; true"
)

_MULTI = ("secure_boot", "module_kernel", "gpu_driver", "package", "dkms", "dkms_log")
_MULTI += ("dkms_out", "klog")


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value and value.strip().isdigit() else None


#: Verdicts of nvidia-smi whose cause the driver state can name.
DRIVER_KINDS = (
    "driver-not-loaded",
    "driver-library-mismatch",
    "nvml-missing",
    "nvml-failed",
    "nvidia-smi-missing",
)


def parse_driver_state(lines: list[str]) -> dict:
    """Read :data:`DRIVER_STATE_COMMAND` output.

    Returns ``{"kernel": "7.0.0-44-generic", "loaded": "580.178.04" | None (module in memory,
    /sys/module/nvidia/version), "installed": version of the module on disk for the running
    kernel (modinfo) | None, "signer": its signer | None, "module_kernels": {kernel: version}
    (every kernel with an nvidia module), "userspace": libnvidia-ml version in the linker cache |
    None, "nouveau_loaded": bool, "nouveau_blacklisted": bool, "reboot_required": bool,
    "nvidia_smi": path | None, "secure_boot": True (enforced) | False | None (unknown),
    "secure_boot_state": "enforced" | "shim-validation-disabled" | "setup-mode" | "disabled" |
    "no-efi" | "unsupported" | "unknown", "secure_boot_note": one sentence, "mok_enrolled": the
    Machine Owner Key DKMS signs with is enrolled (True / False / None: no key), "gpu_drivers":
    [driver bound to each NVIDIA GPU on the PCI bus, None when unbound], "gpu_addresses": [...],
    "packages": [installed driver packages], "dkms": [DkmsEntry], "dkms_logs": [make.log paths],
    "dkms_output": [DKMS error lines], "kernel_log": [NVIDIA kernel log lines of this boot]}``.
    """
    values: dict[str, str] = {}
    multi: dict[str, list[str]] = {key: [] for key in _MULTI}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in multi:
            multi[key].append(value.rstrip())
        else:
            values[key] = value.strip()
    efi = values.get("efi")
    sb = diagnosis.secure_boot(
        "\n".join(multi["secure_boot"]),
        efi=None if efi is None else efi == "1",
        sb_var=_int_or_none(values.get("sb_var")),
        setup_var=_int_or_none(values.get("setup_var")),
        moksbstate=values.get("moksbstate") == "1" if "moksbstate" in values else None,
    )
    module_kernels = {}
    for entry in multi["module_kernel"]:
        kernel, _, version = entry.partition(" ")
        module_kernels[kernel] = version.strip()
    gpus = [entry.split() for entry in multi["gpu_driver"] if entry.split()]
    return {
        "kernel": values.get("kernel", ""),
        "loaded": values.get("loaded") or None,
        "installed": values.get("installed") or None,
        "signer": values.get("signer") or None,
        "module_kernels": module_kernels,
        "userspace": values.get("userspace") or None,
        "nouveau_loaded": values.get("nouveau_loaded") == "1",
        "nouveau_blacklisted": bool(values.get("nouveau_blacklisted")),
        "reboot_required": values.get("reboot_required") == "1",
        "nvidia_smi": values.get("nvidia_smi") or None,
        "secure_boot": sb.enforced,
        "secure_boot_state": sb.state,
        "secure_boot_note": str(sb.verdict),
        # the key DKMS signs with (Ubuntu's update-secureboot-policy): "is already enrolled"
        "mok_enrolled": None if "mok" not in values else "already enrolled" in values["mok"],
        "gpu_addresses": [g[0] for g in gpus],
        "gpu_drivers": [None if len(g) < 2 or g[1] == "-" else g[1] for g in gpus],
        "packages": [p.strip() for p in multi["package"] if p.strip()],
        "dkms": parse_dkms_status("\n".join(multi["dkms"])),
        "dkms_logs": multi["dkms_log"],
        "dkms_output": multi["dkms_out"],
        "kernel_log": multi["klog"],
    }


def diagnose_driver(
    state: dict, gpu_drivers: list[str | None] | None = None, install_path: str | None = None
) -> list[diagnosis.Verdict]:
    """The driver's verdicts (diagnosis library, source ``driver-state``) from
    :func:`parse_driver_state` output. ``gpu_drivers`` (the driver bound to each NVIDIA GPU on
    the PCI bus) and ``install_path`` override what the state found itself. A driver that is not
    loaded is one verdict, ``driver-not-loaded/<cause>``; [] for a healthy driver."""
    merged = dict(state)
    if gpu_drivers is not None:
        merged["gpu_drivers"] = gpu_drivers
    if install_path is not None:
        merged["install_path"] = install_path
    return diagnosis.classify_driver_state(merged)


def explain(verdicts: list[diagnosis.Verdict], state: dict | None) -> list[diagnosis.Verdict]:
    """Replace a tool's general verdict ("the NVIDIA kernel module is not loaded", nvidia-smi
    missing) by the driver state's specific one of the same kind, with its cause and fix."""
    if state is None:
        return list(verdicts)
    driver = diagnose_driver(state)
    not_loaded = [v for v in driver if v.kind == "driver-not-loaded"]
    general = [v for v in verdicts if v.kind in DRIVER_KINDS]
    if not_loaded and general:
        return [v for v in verdicts if v.kind not in DRIVER_KINDS] + not_loaded
    return diagnosis.refine(verdicts, driver)
