"""Pure helpers of the voxcpm role: paths, the server's command line and its environment.

Deploys and tests (unit and testinfra) share them, so an expectation is never a second copy.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roles.vllm.flags import systemd_quote

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "files" / "model" / "manifests"
UNIT = "voxcpm.service"
#: The mode target of issue 4 (created by the modes work); the unit is PartOf= and WantedBy= it.
MEDIA_TARGET = "rigup-media.target"


def interpreter_dir_name(version: str, arch: str) -> str:
    """Directory uv gives a managed CPython: ``cpython-3.12.16-linux-x86_64-gnu``.

    ``arch`` is ``uname -m`` (x86_64, aarch64). glibc only: Ubuntu and Debian, rigup's targets.
    """
    return f"cpython-{version}-linux-{arch}-gnu"


def manifest_identity(manifest: str) -> tuple[str, str]:
    """``(name, revision)`` of a model manifest (files/model/manifests/<manifest>.toml).

    Raises ``FileNotFoundError`` / ``tomllib.TOMLDecodeError`` / ``KeyError`` for a missing or
    malformed manifest.
    """
    path = Path(manifest) if manifest.startswith("/") else MANIFESTS / f"{manifest}.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return str(data["name"]), str(data["revision"])


def voxcpm_model_dir(data: Any) -> str:
    """Where the VoxCPM2 checkpoint is placed: ``<model_store_dir>/<name>/<revision>`` (issue 5's
    layout, manifest-format.md section 4; the same path ``roles.model.placed_path`` returns)."""
    name, revision = manifest_identity(str(data.get("voxcpm_model_manifest")))
    return f"{str(data.get('model_store_dir')).rstrip('/')}/{name}/{revision}"


@dataclass(frozen=True)
class VoxcpmPaths:
    """Absolute paths of the voxcpm role on a host. Build with :meth:`from_data`."""

    python_install_dir: str  # UV_PYTHON_INSTALL_DIR: uv-managed CPython builds
    root: str
    venv: str
    python: str  # the venv's interpreter
    lock: str
    server: str
    etc: str
    env_file: str
    home: str
    voices: str
    unit: str
    model_dir: str

    @classmethod
    def from_data(cls, data: Any) -> VoxcpmPaths:
        prefix = str(data.get("rigup_prefix")).rstrip("/")
        etc = f"{str(data.get('rigup_etc_dir')).rstrip('/')}/voxcpm"
        home = f"{str(data.get('rigup_state_dir')).rstrip('/')}/voxcpm"
        root = f"{prefix}/voxcpm"
        return cls(
            python_install_dir=f"{prefix}/python",
            root=root,
            venv=f"{root}/venv",
            python=f"{root}/venv/bin/python",
            lock=f"{root}/requirements.lock",
            server=f"{root}/bin/voxcpm_server.py",
            etc=etc,
            env_file=f"{etc}/voxcpm.env",
            home=home,
            voices=f"{home}/voices",
            unit=f"/etc/systemd/system/{UNIT}",
            model_dir=voxcpm_model_dir(data),
        )

    def interpreter(self, version: str, arch: str) -> str:
        """The uv-managed CPython the venv is built from."""
        minor = ".".join(version.split(".")[:2])
        return f"{self.python_install_dir}/{interpreter_dir_name(version, arch)}/bin/python{minor}"


def server_args(data: Any, p: VoxcpmPaths) -> list[str]:
    """Arguments of files/voxcpm/voxcpm_server.py from the settings (``--flag value`` pairs)."""
    args = [
        "--model-dir", p.model_dir,
        "--host", str(data.get("voxcpm_host")),
        "--port", str(data.get("voxcpm_port")),
        "--served-model-name", str(data.get("voxcpm_served_model_name")),
        "--voices-dir", p.voices,
        # exactly "cuda": voxcpm 2.0.3 torch.compiles only then (VoxCPM2Model.optimize checks
        # device != "cuda"), so the GPU is chosen by CUDA_VISIBLE_DEVICES, not "cuda:N"
        "--device", "cuda",
        "--cfg-value", str(data.get("voxcpm_cfg_value")),
        "--inference-timesteps", str(data.get("voxcpm_inference_timesteps")),
    ]  # fmt: skip
    if not data.get("voxcpm_torch_compile"):
        args.append("--no-optimize")
    if data.get("voxcpm_test_double_synthesizer"):
        args += ["--synthesizer", "test-double"]
    return args


def exec_start(p: VoxcpmPaths, args: list[str]) -> str:
    """The unit's ExecStart= value, each argument systemd-quoted (roles.vllm.flags)."""
    return " ".join(systemd_quote(a) for a in [p.python, p.server, *args])


def service_env(data: Any, p: VoxcpmPaths) -> dict[str, str]:
    """Environment file of the service: offline hubs, the GPU, caches in the service's home."""
    cache = f"{p.home}/cache"
    return {
        "HOME": p.home,
        "TMPDIR": f"{p.home}/tmp",
        "HF_HUB_OFFLINE": "1",  # load only the placed directory, never the network
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": f"{cache}/huggingface",
        "MODELSCOPE_CACHE": f"{cache}/modelscope",
        "XDG_CACHE_HOME": cache,
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",  # torch.compile (optimize=True)
        "TRITON_CACHE_DIR": f"{cache}/triton",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA numbers GPUs as nvidia-smi does
        "CUDA_VISIBLE_DEVICES": str(data.get("voxcpm_gpu_index")),
        "PYTHONUNBUFFERED": "1",
        "DO_NOT_TRACK": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",  # voxcpm depends on gradio; no telemetry
    }


def is_loopback(address: str) -> bool:
    """True for an address only this host reaches (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name: may resolve anywhere
        return False


def probe_url(data: Any, path: str = "/ready") -> str:
    """URL of the server's ``path`` as seen from the host itself."""
    bind = str(data.get("voxcpm_host"))
    probe = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
    if ":" in probe:
        probe = f"[{probe}]"
    return f"http://{probe}:{data.get('voxcpm_port')}{path}"


def start_decision(data: Any, has_driver: bool) -> str | None:
    """None when the service should run; otherwise why it is kept installed but stopped.

    It runs with the test double selected (no GPU needed), or on a host that declares GPUs and
    has the NVIDIA driver.
    """
    if data.get("voxcpm_test_double_synthesizer"):
        return None
    gpus = data.get("nvidia_gpu_count")
    if gpus == 0:
        return "this host declares no NVIDIA GPUs (nvidia_gpu_count = 0)"
    if not has_driver:
        return f"it declares {gpus} GPU(s) but has no NVIDIA driver (no nvidia-smi on PATH)"
    return None
