"""Host answers for plan tests with pyinfra's @fake connector.

Each scenario returns ``(fake_responses, host_data_overrides)``. Answers follow the real output
shapes of the facts involved (captured from the lab machine and from Ubuntu hosts); anything not
matched answers with empty output, which pyinfra facts read as "absent".
"""

from __future__ import annotations

import re
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIRROR = "/srv/mirror/Qwen3.6-27B-int4-AutoRound"
PLACED = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"


def _ubuntu_2604(uid: int = 0, systemd: bool = True) -> dict:
    return {
        "uname -s": ["Linux"],
        "/etc/os-release": [
            "id=ubuntu",
            "version_id=26.04",
            f"systemd={int(systemd)}",
            f"uid={uid}",
        ],
        re.compile(r"^command -v (useradd|usermod|groupadd)"): ["/usr/sbin/useradd"],
        # roles/nvidia/facts.py Glibc: Ubuntu 26.04's (tests/fixtures/glibc)
        "getconf GNU_LIBC_VERSION": _fixture("glibc/ubuntu-26.04-getconf.txt"),
        # pyinfra's Which: dracut's update-initramfs (Ubuntu 26.04's initramfs generator)
        re.compile(r"command -v '?update-initramfs'? \|\| true"): ["/usr/sbin/update-initramfs"],
    }


# --- Models ---
#: roles/model/facts.py ModelCandidates: what the local source finds under model_local_dirs
CANDIDATES = re.compile(r"echo store ")
FREE_SPACE = "df -B1 --output=target,avail,size"


def _free(gb: int = 500) -> dict:
    """roles/common/preflight.py FreeSpace: ``gb`` GB free on / for the models' destinations
    (the shape of tests/fixtures/lab/freespace-tmpfs-full.txt)."""
    lines = []
    for dest in (PLACED, VOXCPM_PLACED):
        lines += [f"== {dest}", f"/          {gb * 10**9} 2000000000000"]
    return {FREE_SPACE: lines}


def _mirror_present(free_gb: int = 500) -> dict:
    return {
        **_voxcpm_copy_present(),  # the VoxCPM2 local copy (its own answers first)
        CANDIDATES: [f"mirror {MIRROR}"],
        **_free(free_gb),
        f"test -d {MIRROR}": [
            "@present",
            "1524 config.json",
            "95233 model.safetensors.index.json",
            "9932771000 model-00001-of-00002.safetensors",
            "8543210000 model-00002-of-00002.safetensors",
            "11422654 tokenizer.json",
        ],
        f"test -d {PLACED}": ["@absent"],
    }


def _driver() -> dict:
    """pyinfra's Which fact finds nvidia-smi (only that fact: other commands mention it too)."""
    return {re.compile(r"command -v '?nvidia-smi'? \|\| true"): ["/usr/bin/nvidia-smi"]}


# --- NVIDIA layer: answers of roles/nvidia/facts.py, shaped like the real tools -------------------
# Two RTX 3090s at 01:00.0 and 02:00.0 (PCI device 0x2204), Ubuntu 26.04's driver 580.178.04.
DRIVER = "580.178.04"
KERNEL = "7.0.0-44-generic"
UUIDS = ("GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111")


def _fixture(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def _pci(count: int = 2, driver: str = "-") -> dict:
    lines = [f"0000:0{i + 1}:00.0 0x2204 0x030000 {driver}" for i in range(count)]
    return {"$(cat $d/device) $c": lines}  # the NvidiaPciGpus fact


def _driver_state(
    loaded: str | None = DRIVER,
    userspace: str | None = DRIVER,
    installed: str | None = DRIVER,
    nouveau: bool = False,
    secure_boot: str | tuple[str, ...] = "SecureBoot disabled",
    dkms: tuple[str, ...] = (),
    kernel: str = KERNEL,
    module_kernels: tuple[str, ...] = (),
    blacklisted: bool | None = None,
) -> dict:
    """rigup/nvidia DRIVER_STATE_COMMAND's answer (``secure_boot``: the lines of
    ``mokutil --sb-state``; ``module_kernels``: the kernels with an nvidia module on disk;
    ``blacklisted``: nouveau blacklisted, by default where the driver is loaded)."""
    sb_lines = (secure_boot,) if isinstance(secure_boot, str) else secure_boot
    blacklisted = bool(loaded) if blacklisted is None else blacklisted
    lines = [
        f"kernel={kernel}",
        *(f"module_kernel={k} {DRIVER}" for k in module_kernels),
        f"loaded={loaded or ''}",
        f"installed={installed or ''}",
        f"userspace={userspace or ''}",
        f"nouveau_loaded={int(nouveau)}",
        "nouveau_blacklisted=/etc/modprobe.d/rigup-blacklist-nouveau.conf"
        if blacklisted
        else "nouveau_blacklisted=",
        "reboot_required=0",
        "nvidia_smi=/usr/bin/nvidia-smi" if userspace else "nvidia_smi=",
        *(f"secure_boot={line}" for line in sb_lines),
        "efi=1",
        *(f"dkms={line}" for line in dkms),
    ]
    return {'k=$(uname -r); echo "kernel=$k"': lines}


def _kernel(fixture: str = "kernel-server-generic.txt") -> dict:
    """roles/nvidia/facts.py KernelPackages: the installed kernel packages of a capture in
    tests/fixtures/field (a server's linux-generic by default)."""
    return {"|${Package}|${Depends}": _fixture(f"field/{fixture}")[1:]}


def _units(**states: str) -> dict:
    """roles/nvidia/facts.py SystemdUnits: ``unit=UnitFileState`` (masked, enabled...)."""
    lines = []
    for unit, state in states.items():
        load = "masked" if state.startswith("masked") else "loaded"
        lines += [f"Id={unit}.service", f"LoadState={load}", f"UnitFileState={state}"]
    return {"systemctl show -p Id,LoadState,UnitFileState": lines}


def _packages(installed: dict[str, str] | None = None, sources=(), held=()) -> dict:
    lines = [f"pkg ii  {name} {version}" for name, version in (installed or {}).items()]
    lines += [f"source {s}" for s in sources] + [f"hold {h}" for h in held]
    return {"dpkg-query -W -f='pkg ": lines}


UBUNTU_DRIVER_PACKAGES = {
    "nvidia-driver-580-open": f"{DRIVER}-0ubuntu0.26.04.1",
    "linux-modules-nvidia-580-open-generic": "7.0.0-44.44",
    "libnvidia-compute-580": f"{DRIVER}-0ubuntu0.26.04.1",
    "nvidia-utils-580": f"{DRIVER}-0ubuntu0.26.04.1",
}


def _smi(
    limits=(290.0, 290.0), maxes=(350.0, 400.0), defaults=(350.0, 370.0), persistence="Enabled"
) -> dict:
    """nvidia-smi --query-gpu (noheader, nounits) with the 3090 figures of
    tests/fixtures/rtx3090/query-csv-capped-290.txt (board 1 allows 400 W)."""
    lines = [
        f"{i}, {UUIDS[i]}, 00000000:0{i + 1}:00.0, NVIDIA GeForce RTX 3090, {DRIVER}, {persistence}, "
        f"{limits[i]:.2f}, {defaults[i]:.2f}, 100.00, {maxes[i]:.2f}, {limits[i]:.2f}, 8.6"
        for i in range(len(limits))
    ]
    return {"--query-gpu=index,uuid": ["@exit 0", *lines]}


def _interconnect(
    nvlink: str = "rtx3090/nvlink-s-healthy.txt",
    topo: str = "rtx3090/topo-m-nv4.txt",
    p2p: str = "rtx3090/topo-p2p-r-ok.txt",
) -> dict:
    return {
        "echo @nvlink": [
            "@nvlink",
            *_fixture(nvlink),
            "@topo",
            *_fixture(topo),
            "@p2p",
            *_fixture(p2p),
        ]
    }


def _bare_3090s(**state) -> dict:
    """Ubuntu 26.04 with two 3090s on the PCI bus and no NVIDIA software at all."""
    kernel = state.pop("kernel", "kernel-server-generic.txt")
    return {
        **_pci(driver=state.pop("pci_driver", "-")),
        **_driver_state(loaded=None, userspace=None, installed=None, **state),
        **_packages(),
        **_kernel(kernel),
    }


def _cuda_math_header(edited: bool = True) -> dict:
    """roles/nvidia/facts.py CudaMathHeader: the rsqrt/rsqrtf declarations of the pinned
    toolkit's crt/math_functions.h (tests/fixtures/cuda, at the real header's line numbers),
    with rigup's noexcept(true) (``edited``) or as NVIDIA ships them (a toolkit installed again)."""
    from roles.nvidia.cuda_headers import patched_header

    lines = _fixture("cuda/math_functions-13.0.88-rsqrt.h")
    if edited:
        lines = patched_header("\n".join(lines)).split("\n")
    (double,) = [line for line in lines if line.startswith("extern") and "rsqrt(double x)" in line]
    (single,) = [line for line in lines if line.startswith("extern") and "rsqrtf(float x)" in line]
    return {"crt/math_functions.h": ["@present", f"629:{double}", f"653:{single}"]}


def _converged_nvidia(**smi) -> dict:
    """The NVIDIA layer as rigup leaves it: driver loaded and consistent, held, 290 W, NVLink."""
    held = [
        *UBUNTU_DRIVER_PACKAGES,
        "linux-generic",
        "linux-image-generic",
        "linux-headers-generic",
    ]
    return {
        **_pci(driver="nvidia"),
        **_driver_state(),
        **_packages(UBUNTU_DRIVER_PACKAGES, held=held),
        "dpkg -l": [
            f"ii  {name}  {version}  amd64  NVIDIA driver package"
            for name, version in {
                **UBUNTU_DRIVER_PACKAGES,
                "pciutils": "1:3.14.0-1build2",
                "mokutil": "0.7.2-2",
                "kmod": "34.2-2ubuntu2",
                "dracut": "110-11ubuntu0.1",
            }.items()
        ],
        **_kernel(),
        **_smi(**smi),
        **_interconnect(),
        **_cuda_math_header(),
        # `systemctl show --all --property Id --property SubState|UnitFileState <unit>`, as
        # systemd prints it for the applied oneshots (tests/fixtures/systemd/show-oneshot-applied.txt)
        "--property SubState": [
            *("Id=nvidia-persistenced.service", "SubState=running"),
            *("Id=rigup-gpu-power.service", "SubState=exited"),
            *("Id=rigup-nvlink.service", "SubState=exited"),
        ],
        "--property UnitFileState": [
            *("Id=nvidia-persistenced.service", "UnitFileState=enabled"),
            *("Id=rigup-gpu-power.service", "UnitFileState=enabled"),
            *("Id=rigup-nvlink.service", "UnitFileState=enabled"),
        ],
    }


def fresh_rig():
    """A bare Ubuntu 26.04 box with two 3090s (no NVIDIA software), the checkpoint on a mounted
    mirror; 2 GPUs declared. Ubuntu install path."""
    return {**_bare_3090s(), **_ubuntu_2604(), **_mirror_present()}, {}


KEYRING_SHA256 = "0" * 63 + "1"  # a syntactically valid pin: the plan never downloads


def fresh_rig_nvidia_repo():
    """As fresh_rig, with NVIDIA's CUDA repository as the install path."""
    return {**_bare_3090s(), **_ubuntu_2604(), **_mirror_present()}, {
        "nvidia_install_path": "nvidia-repo",
        "nvidia_cuda_keyring_sha256": KEYRING_SHA256,
    }


def secure_boot_ubuntu():
    """Secure Boot on, Ubuntu path (Canonical's signed modules): must go ahead."""
    return {
        **_bare_3090s(secure_boot="SecureBoot enabled"),
        **_ubuntu_2604(),
        **_mirror_present(),
    }, {}


def secure_boot_nvidia_repo():
    """Secure Boot on, NVIDIA repository path (unsigned DKMS modules): must stop with the steps."""
    return {
        **_bare_3090s(secure_boot="SecureBoot enabled"),
        **_ubuntu_2604(),
        **_mirror_present(),
    }, {
        "nvidia_install_path": "nvidia-repo",
        "nvidia_cuda_keyring_sha256": KEYRING_SHA256,
    }


def nouveau_loaded():
    """A fresh desktop install: nouveau loaded and bound to both GPUs."""
    return {
        **_bare_3090s(nouveau=True, pci_driver="nouveau"),
        **_ubuntu_2604(),
        **_mirror_present(),
    }, {}


def converged_rig():
    """The NVIDIA layer already converged: driver loaded, held, 290 W, persistence, NVLink NV4."""
    return {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}, {}


def converged_rig_to_closed():
    """converged_rig (driver 580 open loaded) with nvidia_driver_variant = "server": the switch
    to the closed modules under a running driver, which needs a reboot."""
    facts, data = converged_rig()
    return facts, {**data, "nvidia_driver_variant": "server"}


def former_host_libraries():
    """As converged_rig, with the NVIDIA layer's ``lib`` holding the package rigup and, beside
    it, the modules of another layout (rigup_nvidia/, rigup_diagnosis/, rigup_units.py): the
    answer of roles/common/path_states.py TreeStates (``find -printf`` lines, then the files'
    sha256 after ``@sha256``)."""
    lib = "/opt/rigup/nvidia/lib"

    def entry(kind: str, path: str, mode: str = "755") -> str:
        return f"{kind}\t{mode}\troot\troot\t4096\t\t{path}"

    return {
        **_converged_nvidia(),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        re.compile(rf"find {re.escape(lib)} -printf"): [
            entry("d", lib),
            entry("d", f"{lib}/rigup"),
            entry("d", f"{lib}/rigup_nvidia"),
            entry("d", f"{lib}/rigup_diagnosis"),
            entry("f", f"{lib}/rigup_units.py", "644"),
            "@sha256",
            f"{'0' * 64}  {lib}/rigup_units.py",
        ],
    }, {}


def toolkit_reinstalled():
    """As converged_rig, with the CUDA toolkit's venv built again: its crt/math_functions.h is
    NVIDIA's again, without the noexcept glibc 2.43 needs."""
    return {
        **_converged_nvidia(),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        **_cuda_math_header(edited=False),
    }, {}


def older_glibc_rig():
    """As toolkit_reinstalled, on a glibc older than 2.42 (Debian 13's 2.41): nothing to edit."""
    return {
        **_converged_nvidia(),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        **_cuda_math_header(edited=False),
        "getconf GNU_LIBC_VERSION": _fixture("glibc/debian-13-getconf.txt"),
    }, {}


def power_limit_out_of_range():
    """450 W requested; GPU 0's board allows 350 W at most (GPU 1's 400 W)."""
    return {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "nvidia_power_limit_w": 450
    }


def one_gpu_missing():
    """Two GPUs declared, one on the PCI bus (a card fell off the bus / riser / power)."""
    return {
        **_converged_nvidia(),
        **_pci(count=1, driver="nvidia"),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def nvlink_degraded():
    """One NVLink link inactive on both GPUs (topology still NV3): required -> refused."""
    return {
        **_converged_nvidia(),
        **_interconnect(nvlink="rtx3090/nvlink-s-one-link-inactive.txt"),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def nvlink_degraded_optional():
    """As nvlink_degraded with nvlink_required = False: converges, warns, P2P off."""
    responses, _ = nvlink_degraded()
    return responses, {"nvlink_required": False}


def version_mismatch():
    """An unattended upgrade replaced the libraries under the loaded module (580.159.03)."""
    return {
        **_converged_nvidia(),
        **_driver_state(loaded="580.159.03"),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def version_mismatch_no_reboot():
    """As version_mismatch with nvidia_reboot_allowed = False (the @local case takes the same
    branch, unit-tested in tests/unit/test_nvidia_role.py): refuses before any change."""
    responses, _ = version_mismatch()
    return responses, {"nvidia_reboot_allowed": False}


def dkms_failed():
    """NVIDIA repository path: the DKMS build failed for the running kernel, nothing loaded."""
    return {
        **_pci(driver="-"),
        **_driver_state(
            loaded=None, installed=None, dkms=(f"nvidia/{DRIVER}, {KERNEL}, x86_64: built",)
        ),
        **_packages(
            {
                "nvidia-open": f"{DRIVER}-1",
                "nvidia-dkms-580-open": f"{DRIVER}-1",
                "cuda-keyring": "1.1-1",
            },
            sources=["/etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list"],
        ),
        **_ubuntu_2604(),
        **_mirror_present(),
    }, {"nvidia_install_path": "nvidia-repo", "nvidia_cuda_keyring_sha256": KEYRING_SHA256}


def both_paths():
    """Ubuntu's prebuilt modules and NVIDIA's repository on one host."""
    return {
        **_converged_nvidia(),
        **_packages(
            UBUNTU_DRIVER_PACKAGES | {"cuda-keyring": "1.1-1"},
            sources=["/etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list"],
        ),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def fresh_desktop_hwe():
    """Field report: Ubuntu Desktop 26.04, `uname -r` 7.0.0-44-generic from linux-generic-hwe-26.04:
    the HWE modules and the HWE kernel meta-packages are planned, not -generic's."""
    return {
        **_bare_3090s(kernel="kernel-desktop-hwe.txt"),
        **_ubuntu_2604(),
        **_mirror_present(),
    }, {}


def no_kernel_metapackage():
    """No installed kernel meta-package tracks the running kernel (a hand-installed kernel)."""
    responses = {**_bare_3090s(), **_ubuntu_2604(), **_mirror_present()}
    responses.update({"|${Package}|${Depends}": ["@kernel 7.0.0-44-generic"]})
    return responses, {}


def shim_validation_disabled_nvidia_repo():
    """Field report: "SecureBoot enabled" then "SecureBoot validation is disabled in shim" on the
    NVIDIA repository path: not enforced, the run goes ahead with a note."""
    sb = ("SecureBoot enabled", "SecureBoot validation is disabled in shim")
    return {**_bare_3090s(secure_boot=sb), **_ubuntu_2604(), **_mirror_present()}, {
        "nvidia_install_path": "nvidia-repo",
        "nvidia_cuda_keyring_sha256": KEYRING_SHA256,
    }


def persistenced_masked():
    """Field report: nvidia-persistenced masked (UnitFileState=masked)."""
    return {
        **_converged_nvidia(),
        **_units(**{"nvidia-persistenced": "masked"}),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def gpu_fell_off_the_bus():
    """Field report: nvidia-smi exits 15, GPU 0's row next to GPU 1's "Unable to determine the
    device handle" line."""
    capture = _fixture("field/smi-gpu1-unreachable.txt")
    responses = {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}
    responses["--query-gpu=index,uuid"] = ["@exit 15", *capture[1:-1]]
    return responses, {}


def driver_not_loaded_secure_boot():
    """The NVIDIA repository's DKMS module is installed but Secure Boot rejects it."""
    state = _fixture("field/state-secure-boot-blocked.txt")[1:]
    return {
        'k=$(uname -r); echo "kernel=$k"': state,
        "--query-gpu=index,uuid": ["@exit 9", *_fixture("field/smi-no-driver.txt")[1:-1]],
        **_pci(driver="-"),
        **_packages(
            {"nvidia-open": f"{DRIVER}-1", "cuda-keyring": "1.1-1"},
            sources=["/etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list"],
        ),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {"nvidia_install_path": "nvidia-repo", "nvidia_cuda_keyring_sha256": KEYRING_SHA256}


def kv_cache_fp8_on_3090s():
    """Field report: fp8 (E4M3) KV cache on RTX 3090s (compute capability 8.6)."""
    return {**_ubuntu_2604(), **_mirror_present()}, {"vllm_kv_cache_dtype": "fp8"}


def fresh_no_gpu():
    """As fresh_rig, but the host declares no GPUs (like the lab machine)."""
    return {**_ubuntu_2604(), **_mirror_present()}, {"nvidia_gpu_count": 0}


#: The lab's running kernel: its container runs the controller's (uname -r in the resolute lab).
LAB_HOST_KERNEL = "6.18.44-fc-v1045"


def lab_next_boot_fresh():
    """The Ubuntu lab before its first converge: no GPUs declared, the driver installed for the
    next boot (nvidia_driver_next_boot), a kernel not Ubuntu's running, linux-generic installed."""
    return {
        **_ubuntu_2604(),
        **_mirror_present(),
        **_driver_state(loaded=None, userspace=None, installed=None, kernel=LAB_HOST_KERNEL),
        **_kernel(),
        **_pci(count=0),
    }, {"nvidia_gpu_count": 0, "nvidia_driver_next_boot": True}


def lab_next_boot_converged():
    """The Ubuntu lab after a converge: Ubuntu's driver installed and held for 7.0.0-44-generic,
    nouveau blacklisted, nvidia-smi present, the module never loaded (the running kernel is the
    controller's)."""
    held = [
        *UBUNTU_DRIVER_PACKAGES,
        "linux-generic",
        "linux-image-generic",
        "linux-headers-generic",
    ]
    return {
        **_ubuntu_2604(),
        **_mirror_present(),
        **_driver(),
        **_driver_state(
            loaded=None,
            installed=None,
            kernel=LAB_HOST_KERNEL,
            module_kernels=(KERNEL,),
            blacklisted=True,
        ),
        **_packages(UBUNTU_DRIVER_PACKAGES, held=held),
        "dpkg -l": [
            f"ii  {name}  {version}  amd64  NVIDIA driver package"
            for name, version in {
                **UBUNTU_DRIVER_PACKAGES,
                "pciutils": "1:3.14.0-1build2",
                "mokutil": "0.7.2-2",
                "kmod": "34.2-2ubuntu2",
                "dracut": "110-11ubuntu0.1",
            }.items()
        ],
        **_kernel(),
        **_pci(count=0),
    }, {"nvidia_gpu_count": 0, "nvidia_driver_next_boot": True}


def lab_next_boot_to_595():
    """The converged Ubuntu lab (580 open) with nvidia_driver_branch = 595: a driver switch."""
    facts, data = lab_next_boot_converged()
    return facts, {**data, "nvidia_driver_branch": 595}


def lab_next_boot_to_server():
    """The converged Ubuntu lab (580 open) with nvidia_driver_variant = "server": the closed
    modules of NVIDIA's datacenter packaging (NVIDIA/open-gpu-kernel-modules#1211's fix)."""
    facts, data = lab_next_boot_converged()
    return facts, {**data, "nvidia_driver_variant": "server"}


def bad_kv_cache_dtype():
    """A typo in a setting: must stop before any operation is even planned."""
    return {**_ubuntu_2604(), **_mirror_present()}, {"vllm_kv_cache_dtype": "fp8_e5m3"}


def too_few_gpus():
    """Tensor parallel 2 on a host that declares one GPU."""
    return {**_ubuntu_2604(), **_mirror_present()}, {"nvidia_gpu_count": 1}


def vllm_alone_no_driver():
    """deploys/vllm.py alone on a bare box: no driver and none being installed by this run."""
    return {**_bare_3090s(), **_ubuntu_2604(), **_mirror_present()}, {}


def _no_copy() -> dict:
    """No local copy of any model under model_local_dirs, nothing placed."""
    return {
        CANDIDATES: [],
        f"test -d {MIRROR}": ["@absent"],
        f"test -d {PLACED}": ["@absent"],
        re.compile(r"echo store \S*/voxcpm2/"): [],
        f"test -d {VOXCPM_COPY}": ["@absent"],
        f"test -d {VOXCPM_PLACED}": ["@absent"],
        "uname -m": ["x86_64"],
        **_free(),
    }


def missing_model_source():
    """Only the local source is configured, the mirror path does not exist, nothing is placed."""
    return {**_bare_3090s(), **_ubuntu_2604(), **_no_copy()}, {"model_sources": ["local"]}


def fresh_rig_from_the_hub():
    """A fresh install with the shipped settings and no local copy of any model: the models
    come from Hugging Face, each unpinned manifest locked on its first placement."""
    return {**_bare_3090s(), **_ubuntu_2604(), **_no_copy()}, {}


def not_a_checkpoint():
    """The mirror path exists but holds no config.json."""
    return {
        **_bare_3090s(),
        **_ubuntu_2604(),
        CANDIDATES: [f"mirror {MIRROR}"],
        f"test -d {MIRROR}": ["@present", "12 README.md"],
        f"test -d {PLACED}": ["@absent"],
    }, {}


def no_systemd():
    """A container or chroot without systemd as PID 1."""
    return {**_ubuntu_2604(systemd=False), **_mirror_present()}, {}


def not_root():
    """Connected as an unprivileged user without --sudo."""
    return {**_ubuntu_2604(uid=1000), **_mirror_present()}, {}


def disk_too_small():
    """The checkpoint (18.5 GB on the mirror) does not fit in 10 GB of free space."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present(free_gb=10)}, {}


def modelscope_only_unpinned():
    """Only ModelScope configured, but the LLM manifest has no lock (ModelScope's files are
    checked against a lock's sha256)."""
    return {**_ubuntu_2604(), **_driver(), CANDIDATES: [], **_free()}, {
        "model_sources": ["modelscope"]
    }


def fresh_rig_run():
    """As fresh_rig, for a real run on @fake: once placed, the checkpoint's config.json reads
    back (what the text-only edit needs at execution time)."""
    responses, overrides = fresh_rig()
    return {f"test -f {PLACED}/config.json": ['{"model_type": "qwen3_5"}'], **responses}, overrides


def fetch_fails():
    """The transfer fails on the host (e.g. a file does not verify): the run must fail there."""
    responses, overrides = fresh_rig_run()
    failure = {
        "success": False,
        "stderr": ["model_fetch: ERROR: config.json: sha256 0000, 1111 expected"],
    }
    return {re.compile(r"model_fetch\.py place"): failure, **responses}, overrides


# --- VoxCPM2 ---------------------------------------------------------------------------
VOXCPM_COPY = "/srv/mirror/VoxCPM2"
VOXCPM_PLACED = "/srv/rigup/models/voxcpm2/unverified-2026-11"


def _voxcpm_copy_present() -> dict:
    """The VoxCPM2 snapshot as `hf download openbmb/VoxCPM2` leaves it (file names from voxcpm
    2.0.3's VoxCPM2Model.from_local; sizes illustrative), nothing placed yet, an x86_64 host."""
    return {
        # the model role's source search for the VoxCPM2 manifest (roles/model/facts.py)
        re.compile(r"echo store \S*/voxcpm2/"): [f"mirror {VOXCPM_COPY}"],
        f"test -d {VOXCPM_COPY}": [
            "@present",
            "1830 config.json",
            "4548832 tokenizer.json",
            "1163 tokenizer_config.json",
            "412 special_tokens_map.json",
            "220913592 audiovae.safetensors",
            "4582418688 model.safetensors",
        ],
        f"test -d {VOXCPM_PLACED}": ["@absent"],
        "uname -m": ["x86_64"],
    }


def voxcpm_python_out_of_range():
    """voxcpm 2.0.3 does not support Python 3.13: refused before any change."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {"voxcpm_python_version": "3.13.1"}


def voxcpm_gpu_index_missing():
    """VoxCPM2 on GPU 2 of a host that declares two."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {"voxcpm_gpu_index": 2}


def voxcpm_no_model_copy():
    """Only the local source; the LLM mirror is there, the VoxCPM2 copy is not, nothing placed."""
    return {
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        # (same compiled pattern as _voxcpm_copy_present's key, so this value replaces it)
        re.compile(r"echo store \S*/voxcpm2/"): [],
        f"test -d {VOXCPM_COPY}": ["@absent"],
    }, {"model_sources": ["local"]}


def voxcpm_venv_on_old_python():
    """A converged rig whose VoxCPM2 venv was built on CPython 3.11.9 before the setting moved to
    3.12.16: the venv is rebuilt on the new interpreter."""
    return {
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        # PythonVersion of the venv's interpreter, and the venv directory (stat, as on Ubuntu)
        "/opt/rigup/voxcpm/venv/bin/python -c 'import platform": ["3.11.9"],
        "test -e /opt/rigup/voxcpm/venv ||": [
            "user=root group=root mode=drwxr-xr-x atime=1764486000 mtime=1764486000 "
            "ctime=1764486000 size=4096 '/opt/rigup/voxcpm/venv'"
        ],
    }, {}


def voxcpm_firewalled():
    """A rig behind a firewall: CPython from a python-build-standalone mirror on a NAS."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "voxcpm_python_install_mirror": "file:///mnt/nas/python-build-standalone"
    }


def _with_gpu_box(scenario):
    """Scenarios about other components run on the rig's hardware: any NVIDIA answer a scenario
    does not give comes from a bare box with two 3090s (appended, so the scenario's own win)."""

    def build():
        responses, overrides = scenario()
        for key, value in _bare_3090s().items():
            responses.setdefault(key, value)
        return responses, overrides

    build.__name__ = scenario.__name__
    build.__doc__ = scenario.__doc__
    return build


SCENARIOS = {
    f.__name__: _with_gpu_box(f)
    for f in (
        fresh_rig,
        fresh_rig_nvidia_repo,
        secure_boot_ubuntu,
        secure_boot_nvidia_repo,
        nouveau_loaded,
        converged_rig,
        former_host_libraries,
        toolkit_reinstalled,
        older_glibc_rig,
        power_limit_out_of_range,
        one_gpu_missing,
        nvlink_degraded,
        nvlink_degraded_optional,
        version_mismatch,
        version_mismatch_no_reboot,
        dkms_failed,
        both_paths,
        fresh_desktop_hwe,
        no_kernel_metapackage,
        shim_validation_disabled_nvidia_repo,
        persistenced_masked,
        gpu_fell_off_the_bus,
        driver_not_loaded_secure_boot,
        kv_cache_fp8_on_3090s,
        vllm_alone_no_driver,
        fresh_no_gpu,
        lab_next_boot_fresh,
        lab_next_boot_converged,
        lab_next_boot_to_595,
        converged_rig_to_closed,
        lab_next_boot_to_server,
        bad_kv_cache_dtype,
        too_few_gpus,
        missing_model_source,
        fresh_rig_from_the_hub,
        not_a_checkpoint,
        no_systemd,
        not_root,
        disk_too_small,
        modelscope_only_unpinned,
        fresh_rig_run,
        fetch_fails,
        voxcpm_python_out_of_range,
        voxcpm_gpu_index_missing,
        voxcpm_no_model_copy,
        voxcpm_firewalled,
        voxcpm_venv_on_old_python,
    )
}


# --- GPU modes, VRAM budget and ComfyUI -------------------------------------------------
def _mode_state(active: str, services: dict[str, str]) -> dict:
    """Answer of roles.modes.ModeTargets: ``active`` target up, each service with its state."""
    lines = []
    for target in ("rigup-llm.target", "rigup-media.target"):
        lines.append(f"@target {target} {'active' if target == active else 'inactive'}")
        lines += [f"@wants {target} {unit} {UNIT_STATES[state]}" for unit, state in services.items()
                  if (unit == "vllm.service") == (target == "rigup-llm.target")]  # fmt: skip
    return {"for t in rigup-llm.target rigup-media.target": lines}


#: systemctl's ActiveState/SubState for the states the scenarios name
UNIT_STATES = {
    "active": "active/running",
    "inactive": "inactive/dead",
    "failed": "failed/failed",
    "crash-loop": "activating/auto-restart",
}


def _running(*units: str) -> dict:
    """pyinfra's SystemdStatus and rigup's UnitState answers: each unit active and running."""
    answers = {}
    for u in units:
        answers[re.compile(rf"--property SubState '?{re.escape(u)}")] = [
            f"Id={u}",
            "SubState=running",
        ]
        answers[re.compile(rf"-p ActiveState -p SubState '?{re.escape(u)}")] = [
            "ActiveState=active",
            "SubState=running",
        ]
    return answers


def llm_mode_running():
    """A converged rig in the LLM mode: vllm.service up, the media mode's ComfyUI down."""
    return {
        **_running("vllm.service"),
        **_mode_state(
            "rigup-llm.target", {"vllm.service": "active", "comfyui.service": "inactive"}
        ),
        **_converged_nvidia(),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def llm_mode_stale():
    """As llm_mode_running, but vllm.service runs an older configuration than the one on disk: a
    converge was interrupted after writing its environment file and before its restart (the
    UnitStartedBefore answer in the shape systemd 259 and stat print it on the lab machine:
    tests/fixtures/systemd/stale/env-changed-*)."""
    responses, overrides = llm_mode_running()
    responses[re.compile(r"--timestamp=unix -p ActiveState .* -- '?vllm\.service")] = [
        "ActiveState=active",
        "SubState=running",
        "NeedDaemonReload=no",
        "ExecMainStartTimestamp=@1796287714",
        "1796287714 /etc/systemd/system/vllm.service",
        "1796287725 /etc/rigup/vllm/vllm.env",
    ]
    return responses, overrides


def llm_mode_disk_full():
    """As llm_mode_running (vllm.service up, this run changes its inputs: a restart is planned),
    with vLLM's TMPDIR on a full 64 MiB tmpfs: roles/common/preflight.py FreeSpace answers as
    the lab machine printed it (tests/fixtures/lab/freespace-tmpfs-full.txt: 1 MiB free)."""
    responses, overrides = llm_mode_running()
    captured = _fixture("lab/freespace-tmpfs-full.txt")[1:-1]  # the output, without $ and [exit]
    return {re.compile(r"df -B1 --output=target,avail,size"): captured, **responses}, overrides


def llm_mode_crash_loop():
    """The LLM mode is on but vllm.service crashes and systemd keeps restarting it."""
    return {
        **_mode_state(
            "rigup-llm.target", {"vllm.service": "crash-loop", "comfyui.service": "inactive"}
        ),
        **_converged_nvidia(),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def media_mode_by_user():
    """The owner switched to the media mode with rigup-mode; the default is still llm."""
    return {
        **_running("comfyui.service"),
        **_mode_state(
            "rigup-media.target", {"vllm.service": "inactive", "comfyui.service": "active"}
        ),
        **_converged_nvidia(),
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
    }, {}


def media_oversubscribed():
    """VoxCPM2 (8 GiB) put on ComfyUI's GPU, which ComfyUI fills but for a 1 GiB reserve."""
    return {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "voxcpm_vram_gib": 8.0,
        "voxcpm_gpu_index": 0,
    }


def llm_oversubscribed():
    """vLLM asked for 99 % of each card, plus its CUDA context outside that budget."""
    return {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "vllm_gpu_memory_utilization": 0.99
    }


def comfyui_highvram():
    """--highvram in comfyui_extra_args: defeats offloading on 24 GB cards."""
    return {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "comfyui_extra_args": ["--highvram"]
    }


def comfyui_new_release():
    """A ComfyUI release with no lock yet: its first run locks it."""
    return {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "comfyui_release": "v0.22.0"
    }


def comfyui_not_installed():
    """A rig without ComfyUI (comfyui_install = False): no workflows, no media rows."""
    return {**_converged_nvidia(), **_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "comfyui_install": False
    }


def comfyui_on_cpu_no_gpu():
    """The lab's shape: no GPU declared, ComfyUI on the CPU, media mode at boot."""
    return {**_ubuntu_2604(), **_mirror_present()}, {
        "nvidia_gpu_count": 0,
        "comfyui_cpu": True,
        "rigup_mode": "media",
    }


SCENARIOS.update(
    {
        f.__name__: f
        for f in (
            comfyui_not_installed,
            llm_mode_running,
            llm_mode_stale,
            llm_mode_disk_full,
            llm_mode_crash_loop,
            media_mode_by_user,
            media_oversubscribed,
            llm_oversubscribed,
            comfyui_highvram,
            comfyui_new_release,
            comfyui_on_cpu_no_gpu,
        )
    }
)
