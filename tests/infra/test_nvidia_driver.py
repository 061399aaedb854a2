"""The NVIDIA driver as the Ubuntu install path leaves it, with or without a GPU: Ubuntu's packages
installed (nvidia-driver-<branch>-open and the signed prebuilt modules of the installed kernel
meta-package's flavour), held with that flavour's kernel meta-packages, kept out of unattended
upgrades; nouveau blacklisted in the target kernel's initramfs; nvidia-persistenced's unit as
Ubuntu ships it, with rigup's drop-in.

Where the driver is installed for the next boot and not loaded (``nvidia_driver_next_boot``: the
lab, a container running its host's kernel), rigup-nvidia-diagnose and the boot units meet the real
nvidia-smi of that driver and must say the module is not loaded, and why. Whatever needs the
module loaded (GPUs, power limit, NVLink) is tests/infra/test_gpu.py, on hosts with GPUs.
Skipped where no driver is installed (no GPUs declared and no nvidia_driver_next_boot) and, but
for the diagnosis, on the nvidia-repo path.
"""

from __future__ import annotations

import json
import shlex

import pytest

from rigup.nvidia import DRIVER_STATE_COMMAND, parse_driver_state
from roles.nvidia import PERSISTENCED, POWER_UNIT, NvidiaPaths
from roles.nvidia.branches import (
    HOLD_PREFIXES,
    driver_metapackage,
    modules_metapackage,
    other_driver_packages,
)
from roles.nvidia.facts import KernelPackages
from roles.nvidia.preflight import driver_packages, target_flavour

#: The diagnosis of a driver installed for a kernel the host does not run (rigup/diagnosis).
NOT_INSTALLED_FOR_KERNEL = "driver-not-loaded/not-installed-for-kernel"
NOT_LOADED = "the NVIDIA kernel module is not loaded"


@pytest.fixture(scope="module", autouse=True)
def _installs_the_driver(data):
    if data.get("nvidia_gpu_count") == 0 and not data.get("nvidia_driver_next_boot"):
        pytest.skip(
            "the host installs no NVIDIA driver (nvidia_gpu_count = 0, "
            "nvidia_driver_next_boot = False)"
        )


@pytest.fixture(scope="module")
def ubuntu_path(data):
    if data.get("nvidia_install_path") != "ubuntu":
        pytest.skip("Ubuntu's packages are the 'ubuntu' install path's")


@pytest.fixture(scope="module")
def next_boot(data):
    if not data.get("nvidia_driver_next_boot"):
        pytest.skip("the driver is loaded at this host's boot (nvidia_driver_next_boot = False)")


@pytest.fixture(scope="module")
def kernel(host):
    """The KernelPackages fact, read as the deploy reads it: ``{"kernel": uname -r,
    "packages": {name: Depends}}``."""
    fact = KernelPackages()
    return fact.process(host.run(fact.command()).stdout.splitlines())


@pytest.fixture(scope="module")
def flavour(data, kernel):
    found = target_flavour(data, kernel["kernel"], kernel["packages"])
    assert found is not None, (
        f"no installed kernel meta-package tracks the driver's kernel: {sorted(kernel['packages'])}"
    )
    return found


@pytest.fixture(scope="module")
def module_kernels(host):
    """The kernels with an nvidia module on disk (``{"7.0.0-44-generic": "580.178.04"}``), from
    the driver state the deploy reads: those the installed modules package built for, which need
    not be the one linux-generic points at (the modules of -updates bring their own kernel)."""
    state = parse_driver_state(host.run(DRIVER_STATE_COMMAND).stdout.splitlines())
    assert state["module_kernels"], "no nvidia module on disk for any kernel: converge"
    return state["module_kernels"]


def test_ubuntu_packages_installed_and_held(host, data, flavour, ubuntu_path):
    wanted = driver_packages(data, flavour)
    branch, variant = data.get("nvidia_driver_branch"), data.get("nvidia_driver_variant")
    assert wanted == [
        driver_metapackage(branch, variant),
        modules_metapackage(branch, variant, flavour.name),
    ], wanted
    missing = [p for p in wanted if not host.package(p).is_installed]
    assert not missing, f"{missing} not installed: converge with deploys/nvidia.py"
    held = set(host.run("apt-mark showhold").stdout.split())
    must_hold = {*wanted, *flavour.metapackages}
    assert must_hold <= held, (
        f"{sorted(must_hold - held)} not held (apt-mark showhold): driver and kernel must move "
        "together, when you run rigup; converge with deploys/nvidia.py"
    )
    assert f"linux-{flavour.name}" in flavour.metapackages, flavour


def test_no_other_driver_is_installed(host, data, ubuntu_path):
    """A branch or variant change removed the other driver's packages (docs/nvidia.md)."""
    listed = host.run(
        "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'nvidia-*' 'libnvidia-*' "
        "'linux-modules-nvidia-*' 'xserver-xorg-video-nvidia-*'"
    ).stdout.splitlines()
    installed = [line.split()[1] for line in listed if line.split()[:1] in (["ii"], ["hi"])]
    branch, variant = data.get("nvidia_driver_branch"), data.get("nvidia_driver_variant")
    others = other_driver_packages(installed, branch, variant)
    assert not others, (
        f"packages of another driver than {driver_metapackage(branch, variant)} are installed: "
        f"{others}; converge with deploys/nvidia.py (it removes them)"
    )


def test_driver_and_kernel_kept_out_of_unattended_upgrades(host, flavour, ubuntu_path):
    f = host.file("/etc/apt/apt.conf.d/51rigup-nvidia")
    assert f.exists, f"{f.path} is missing: converge with deploys/nvidia.py"
    # apt's own reading of the file, not its text: what unattended-upgrades will be given
    dump = host.run("apt-config dump Unattended-Upgrade::Package-Blacklist").stdout
    entries = {line.split('"')[1] for line in dump.splitlines() if line.count('"') == 2}
    want = {*HOLD_PREFIXES, *(f"{name}$" for name in flavour.metapackages)}
    assert want <= entries, f"unattended-upgrades may still upgrade {sorted(want - entries)}"


@pytest.mark.parametrize("which", ["module", "meta-package"])
def test_nouveau_blacklisted_in_the_initramfs(host, module_kernels, flavour, kernel, which):
    """In the initrd of the kernel the modules are for, and of the one linux-<flavour> points at
    (regenerated by the converge when the blacklist changed)."""
    conf = "/etc/modprobe.d/rigup-blacklist-nouveau.conf"
    f = host.file(conf)
    assert f.exists and "blacklist nouveau" in f.content_string, f"{conf}: converge"
    if which == "module":
        target = max(module_kernels)
    else:
        depends = kernel["packages"][f"linux-image-{flavour.name}"]
        target = next(
            d.split()[0].removeprefix("linux-image-")
            for d in depends.split(",")
            if d.split() and d.split()[0].startswith("linux-image-")
        )
    initrd = f"/boot/initrd.img-{target}"
    assert host.file(initrd).exists, f"{initrd} is missing: `update-initramfs -u -k all`"
    inside = conf.lstrip("/")
    if host.exists("lsinitrd"):  # dracut (Ubuntu 26.04): the file's content as packed
        packed = host.run(f"lsinitrd -f {shlex.quote(inside)} {shlex.quote(initrd)}")
        held = packed.rc == 0 and "blacklist nouveau" in packed.stdout
    else:  # initramfs-tools: the listing
        packed = host.run(f"lsinitramfs {shlex.quote(initrd)}")
        held = packed.rc == 0 and inside in packed.stdout.split()
    assert held, (
        f"{initrd} does not hold {conf}: nouveau can claim the GPUs before the root file system "
        f"is mounted; the converge regenerates the initramfs when the blacklist changes "
        f"({packed.stdout[-300:]}{packed.stderr[-300:]})"
    )


def test_persistenced_unit_as_ubuntu_ships_it(host, data, ubuntu_path):
    out = host.run(f"systemctl show {PERSISTENCED} -p FragmentPath -p DropInPaths -p ExecStart")
    got = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    fragment = got.get("FragmentPath", "")
    assert fragment.startswith("/usr/lib/systemd/system/"), (
        f"{PERSISTENCED} is not the unit of a package: {got}"
    )
    owner = host.run(f"dpkg -S {shlex.quote(fragment)}")
    branch = data.get("nvidia_driver_branch")
    assert owner.rc == 0 and owner.stdout.startswith(f"nvidia-compute-utils-{branch}"), (
        f"{fragment} belongs to {owner.stdout.strip() or 'no package'}"
    )
    dropin = "/etc/systemd/system/nvidia-persistenced.service.d/rigup-persistence.conf"
    assert dropin in got.get("DropInPaths", "").split(), got
    want = "--persistence-mode" if data.get("nvidia_persistence_mode") else "--no-persistence-mode"
    assert want in got.get("ExecStart", ""), got


def test_diagnose_says_not_loaded_and_why(host, data, next_boot, kernel, module_kernels):
    np = NvidiaPaths.from_data(data)
    assert host.exists("nvidia-smi"), "nvidia-smi is not installed: converge"
    out = host.run(f"{np.bin}/rigup-nvidia-diagnose --json")
    assert out.rc == 2, f"exit {out.rc}, expected 2 (a failure): {out.stdout}{out.stderr}"
    report = json.loads(out.stdout)
    assert report["loaded"] is None and report["kernel"] == kernel["kernel"], report
    ids = [v["id"] for v in report["verdicts"]]
    assert NOT_INSTALLED_FOR_KERNEL in ids, ids
    verdict = report["verdicts"][ids.index(NOT_INSTALLED_FOR_KERNEL)]
    assert verdict["what"] == NOT_LOADED, verdict
    assert kernel["kernel"] in verdict["why"], verdict
    assert all(k in verdict["why"] for k in module_kernels), (module_kernels, verdict)
    smi = host.run("nvidia-smi")
    assert smi.rc != 0, f"nvidia-smi answered without a loaded module: {smi.stdout}"
    text = host.run(f"{np.bin}/rigup-nvidia-diagnose").stdout
    assert f"FAIL: {NOT_LOADED}" in text, text


@pytest.mark.parametrize("unit", [POWER_UNIT])
def test_boot_unit_refuses_without_the_driver(host, next_boot, kernel, unit):
    start = host.run(f"systemctl start {unit}")
    try:
        assert start.rc != 0, f"{unit} started with no NVIDIA module loaded"
        invocation = host.run(f"systemctl show -p InvocationID --value {unit}").stdout.strip()
        log = host.run(f"journalctl -q --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}")
        assert NOT_LOADED in log.stdout and kernel["kernel"] in log.stdout, log.stdout
        assert "nothing was changed" in log.stdout, log.stdout
    finally:
        host.run(f"systemctl reset-failed {unit} {PERSISTENCED}")
