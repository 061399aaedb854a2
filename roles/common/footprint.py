"""What a GPU service takes from the rig, declared once by its role: its footprint.

Each GPU service role (roles/vllm, roles/voxcpm, roles/comfyui) declares one
:class:`ServiceFootprint` in ``roles/<role>/footprint.py``, and roles/services.py lists them.
The shared layers read the footprints and never name a service: the GPU modes and their VRAM
budget (roles/modes), the port, GPU-index and manifest checks (roles/settings.py), the doctor's
config (roles/doctor/config.py), the unit skeleton (roles/common/service.py) and testinfra.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rigup.diagnosis import DISK_FULL_GIB
from roles.common.paths import ServicePaths
from roles.common.setting import RuleOver, ServiceKeys

#: GPU mode -> the systemd target that holds its services (roles/modes installs the targets).
#: vLLM at tensor parallel 2 fills both 24 GB cards, so the LLM and the media services take
#: turns.
MODES: dict[str, str] = {"llm": "rigup-llm.target", "media": "rigup-media.target"}

#: The ``mode`` of a service that uses no GPU (the router): in no GPU mode, started at
#: boot by this target, its unit without the NVIDIA devices; never listed in roles/services.py
#: (registry_problems refuses a mode that is none of :data:`MODES`).
NO_GPU = ""
NO_GPU_TARGET = "multi-user.target"


@dataclass(frozen=True)
class GpuShare:
    """What one service takes on one GPU: ``gib`` GiB (2**30 bytes), with ``how`` saying how it
    was computed from the settings (printed in the budget)."""

    service: str
    gpu: int
    gib: float
    how: str


@dataclass(frozen=True)
class DiskNeeds:
    """The free space a service needs, GiB (2**30 bytes), each figure with its source.

    + start_gib: what one start writes on each file system it writes (its home with its
      ``tmp`` and caches, its ``ReadWritePaths=``): needed free there before a converge restarts
      it (roles/common/preflight.py :func:`require_free_space`); start_source: how it was measured
    + venv_gib: its venv, needed free on the uv cache's file system (uv unpacks the wheels there
      and hard-links them into the venv) and again on the venv's when that is another file
      system, before a converge (re)builds the venv; venv_source: where the figure comes from
    """

    start_gib: float
    start_source: str
    venv_gib: float
    venv_source: str


#: The least free space, GiB, a service's start needs on each file system it writes: the
#: doctor's ``disk/full`` threshold (rigup.diagnosis.DISK_FULL_GIB), so that the converge never
#: restarts a service onto a file system the doctor calls full. A service whose start was
#: measured to write more declares more.
START_FLOOR_GIB = DISK_FULL_GIB
#: the words every footprint's ``start_source`` begins with
START_FLOOR_SOURCE = "the doctor's disk/full threshold (rigup.diagnosis.DISK_FULL_GIB)"


#: A service's VRAM formula: settings (``host.data`` or a mapping) -> ``[(gpu, gib, how)]``, its
#: share of each GPU it uses ([] when it uses none: a CPU build), ``how`` saying how ``gib`` was
#: computed. Called only for an installed service.
VramFormula = Callable[[Any], list[tuple[int, float, str]]]


@dataclass(frozen=True)
class ServiceFootprint:
    """One GPU service as the shared layers see it.

    + name: the role's folder and the service's short name (``"vllm"``): ``roles/<name>``,
      ``deploys/<name>.py``, the name in the VRAM budget
    + component: the name people know it by (``"vLLM"``)
    + unit: its systemd unit (``"vllm.service"``)
    + mode: the GPU mode that runs it, a key of :data:`MODES`; :data:`NO_GPU` for a service
      that uses no GPU (then ``vram`` returns [] and ``target`` is :data:`NO_GPU_TARGET`)
    + keys: the settings of its account, bind address, port and start timeout
    + ready_path: its readiness probe, ``GET <ready_path>`` on its port answering 200
    + vram: its VRAM formula (:data:`VramFormula`); the function's docstring gives the formula
      and its source
    + settings: the role's settings module (``SETTINGS``, ``RULES``, ``OPTIONAL``,
      ``consistency``: roles.common.setting)
    + paths: the role's :class:`ServicePaths` class (its venv's python and lock, its API key file)
    + install_key: the boolean setting that installs it; "" when it is always installed
    + gpu_index_key: the setting of the one GPU it runs on; "" when its GPUs follow from another
      setting (vLLM's tensor parallel size, checked against the declared GPUs by its own rule)
    + share_keys: the settings that size its VRAM share (named when a GPU is oversubscribed)
    + manifest_keys: the settings naming the model manifests it serves (a name or a list)
    + api_key: whether its API takes a key (``paths.api_key_file``); without one, the boolean
      setting ``open_api_key`` is the owner's opt-in to bind it beyond loopback
    + rules: its rules over settings of other roles too (the declared GPUs, directories), run
      with every other rule by roles/settings.py
    + mislabelled: distributions ``uv sync`` reinstalls at every run in its venv, per settings
      (not a difference from the lock: roles/common/facts.py UvSyncPending)
    + sandbox_ceiling: the ``systemd-analyze security`` exposure its unit may not exceed
      (testinfra; 0 safe ... 10 exposed; the lab's systemd 257 measured 1.5 or less)
    + disk: the free space a start and a venv build need (:class:`DiskNeeds`)
    """

    name: str
    component: str
    unit: str
    mode: str
    keys: ServiceKeys
    ready_path: str
    vram: VramFormula
    settings: ModuleType
    paths: type[ServicePaths]
    disk: DiskNeeds
    install_key: str = ""
    gpu_index_key: str = ""
    share_keys: tuple[str, ...] = ()
    manifest_keys: tuple[str, ...] = ()
    api_key: bool = True
    open_api_key: str = ""
    rules: tuple[RuleOver, ...] = ()
    mislabelled: Callable[[Any], tuple[str, ...]] = lambda data: ()
    sandbox_ceiling: float = 1.5

    @property
    def role(self) -> str:
        """``roles/<name>``: the folder named in its managed files."""
        return f"roles/{self.name}"

    @property
    def deploy(self) -> str:
        """``deploys/<name>.py``: the deploy that converges it alone."""
        return f"deploys/{self.name}.py"

    @property
    def uses_gpu(self) -> bool:
        """Whether it runs on the GPUs (in a GPU mode); False for :data:`NO_GPU`."""
        return self.mode != NO_GPU

    @property
    def target(self) -> str:
        """The systemd target of its mode (``rigup-llm.target``); :data:`NO_GPU_TARGET` for a
        service that uses no GPU."""
        return MODES[self.mode] if self.uses_gpu else NO_GPU_TARGET

    def installed(self, data: Any) -> bool:
        """Whether the settings ``data`` install it (its ``install_key`` true; a key not set
        counts as installed, so that a budget never leaves out what may run)."""
        if not self.install_key:
            return True
        value = data.get(self.install_key)
        return True if value is None else bool(value)

    def shares(self, data: Any) -> list[GpuShare]:
        """Its share of each GPU it uses on a host with settings ``data``; [] when not
        installed."""
        if not self.installed(data):
            return []
        return [GpuShare(self.name, gpu, gib, how) for gpu, gib, how in self.vram(data)]

    def manifests(self, data: Any) -> list[tuple[str, list[str]]]:
        """``[(setting, [manifest, ...])]`` of the models it serves when installed, else []."""
        if not self.installed(data):
            return []
        out = []
        for key in self.manifest_keys:
            value = data.get(key)
            out.append((key, [value] if isinstance(value, str) else list(value or [])))
        return out


def registry_problems(services: Iterable[ServiceFootprint]) -> list[str]:
    """What is wrong with a list of footprints, one string each ([] when they fit together):
    a name, unit or port setting used twice, a mode that is not one of :data:`MODES`, a unit
    not named ``<name>.service``, paths of another component."""
    problems: list[str] = []
    seen: dict[str, dict[Any, str]] = {"name": {}, "unit": {}, "port setting": {}}
    for s in services:
        for what, value in (("name", s.name), ("unit", s.unit), ("port setting", s.keys.port)):
            if value in seen[what]:
                problems.append(f"{s.name}: {what} {value} is {seen[what][value]}'s too")
            seen[what][value] = s.name
        if s.mode not in MODES:
            problems.append(f"{s.name}: mode {s.mode!r} is none of {', '.join(MODES)}")
        if s.unit != f"{s.name}.service":
            problems.append(f"{s.name}: unit {s.unit} is not {s.name}.service")
        if s.paths.COMPONENT != s.name:
            problems.append(f"{s.name}: paths {s.paths.__name__} are {s.paths.COMPONENT}'s")
        if not s.api_key and not s.open_api_key:
            problems.append(f"{s.name}: an API without a key needs its opt-in setting")
    return problems


def by_mode(services: Iterable[ServiceFootprint], data: Any) -> dict[str, list[str]]:
    """The units ``data`` installs, per mode, sorted: ``{"llm": ["vllm.service"], "media":
    ["comfyui.service", "voxcpm.service"]}`` (every mode of :data:`MODES` is a key)."""
    installed = [s for s in services if s.installed(data)]
    return {mode: sorted(s.unit for s in installed if s.mode == mode) for mode in MODES}


def setting_or(data: Mapping[str, Any] | Any, key: str, default: Any) -> Any:
    """``data.get(key)``, or ``default`` when it is None (a mapping without the key)."""
    value = data.get(key)
    return default if value is None else value
