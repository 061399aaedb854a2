"""modes: one GPU mode at a time, as conflicting systemd targets, with a VRAM budget.

vLLM at tensor parallel 2 fills both 24 GB cards, so the rig runs either the LLM mode
(``rigup-llm.target``: vllm.service) or the media mode (``rigup-media.target``: comfyui.service,
voxcpm.service); each service's footprint (roles/services.py) names its mode. The targets
conflict, so starting one stops the other and, through each service's ``PartOf=``, its
services, before the new mode's services start. Each service unit is ``WantedBy=`` its mode's
target; a service is *enabled* (linked into its target) only on a host where it can run, so on
a host without GPUs or NVIDIA driver the targets still switch for real while the GPU services
stay installed and stopped.

Settings: rigup_mode (the mode at boot and after a fresh deploy), nvidia_gpu_vram_gib,
cuda_context_gib and each service's share (its footprint's VRAM formula; roles/modes/budget.py
adds them up). The budget is checked with the other settings, before any change
(roles/settings.py).

Switch with ``rigup-mode llm|media`` (files/modes/rigup-mode.j2); ``rigup-mode`` alone shows the
mode and its services.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FactBase, deploy, operation
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from roles import services as registry
from roles.common.footprint import MODES, by_mode
from roles.common.paths import Layout
from roles.common.placed import directory_placed, link_placed, survey, template_placed
from roles.common.service import rigup_start
from roles.modes.budget import budget_report

FILES = Path(__file__).resolve().parents[2] / "files"
UNIT_DIR = "/etc/systemd/system"
#: where the switch command is linked so that it is on root's PATH
COMMAND_LINK = "/usr/local/sbin/rigup-mode"


def mode_services(data) -> dict[str, list[str]]:
    """The GPU services installed on this host per mode, from their footprints
    (roles/services.py): ``{"llm": ["vllm.service"], "media": ["comfyui.service", ...]}``."""
    return by_mode(registry.SERVICES, data)


class ModeTargets(FactBase):
    """State of each mode target and of the units it wants (the enabled services).

    Returns ``{"rigup-llm.target": {"state": "active", "wants": {"vllm.service":
    "active/running"}}, ...}``: the target's ActiveState, and ``ActiveState/SubState`` of each
    wanted unit (``activating/auto-restart`` is a crash loop, ``activating/start-post`` a start
    waiting for readiness). A target that is not installed reads as ``inactive`` with no wants.
    """

    def command(self, targets: list[str]) -> str:
        loop = " ".join(shlex.quote(t) for t in targets)
        return (
            f"for t in {loop}; do "
            'echo "@target $t $(systemctl is-active "$t" 2>/dev/null || true)"; '
            'for u in $(systemctl show -p Wants --value "$t" 2>/dev/null); do '
            'echo "@wants $t $u $(systemctl show -p ActiveState -p SubState --value "$u" '
            '2>/dev/null | paste -sd/ -)"; done; done'
        )

    def process(self, output: list[str]) -> dict[str, dict]:
        targets: dict[str, dict] = {}
        for line in output:
            words = line.split()
            if len(words) >= 2 and words[0] == "@target":
                state = words[2] if len(words) > 2 else "inactive"
                targets[words[1]] = {"state": state, "wants": {}}
            elif len(words) >= 3 and words[0] == "@wants" and words[1] in targets:
                state = words[3] if len(words) > 3 else "inactive"
                targets[words[1]]["wants"][words[2]] = state
        return targets


#: ActiveState values of a target that count as a mode being on
UP = ("active", "activating", "reloading")


@operation()
def mode_active(default_target: str, targets: list[str], rigup_start: str):
    """Keep one mode running: the active one, or ``default_target`` when none is active.

    + default_target: target to start when no mode target is active (fresh host, after boot
      into no mode)
    + targets: every mode target
    + rigup_start: the ``rigup-start`` script (roles/common/service.py)

    A mode the user switched to with ``rigup-mode`` is kept, not reverted to the default. The
    mode's enabled services that are down are started; a service counts as up only when it is
    ``active/running`` (a crash loop, ``activating/auto-restart``, is down). ``rigup-start``
    returns when each answers its readiness check and is still up a moment later, or fails
    naming the unit with its journal. A no-op when the mode and all its enabled services are up.
    """
    state = host.get_fact(ModeTargets, targets=targets) or {}
    active = [t for t in targets if state.get(t, {}).get("state") in UP]
    target = active[0] if active else default_target
    wants = state.get(target, {}).get("wants", {})
    down = sorted(u for u, s in wants.items() if s != "active/running")
    if active and not down:
        up = ", ".join(sorted(wants)) or "no enabled services"
        host.noop(f"{target} is active ({up})")
        return
    yield f"systemctl start {shlex.quote(target)}"
    # After the target start, the wanted services (read again on the host: a first deploy has
    # just enabled them) are started explicitly so that the run waits for their readiness.
    yield (
        f"w=$(systemctl show -p Wants --value {shlex.quote(target)}); "
        f'if [ -n "$w" ]; then {shlex.quote(rigup_start)} $w; fi'
    )


@deploy("GPU modes")
def modes(settings) -> None:
    """Install both mode targets and ``rigup-mode``, make ``rigup_mode`` the boot mode, and keep
    a mode running. Runs after the service roles (deploys/full.py), which link each service into
    its target where it can run. The budget was checked with the settings
    (roles.settings.host_settings); it is printed here."""
    data = settings
    p = Layout.from_data(data)
    for mode, lines in budget_report(data).items():
        for line in lines or ["no GPU services"]:
            logger.info(f"[{host.name}] VRAM budget, {mode} mode: {line}")

    services = mode_services(data)
    command = f"{p.prefix}/bin/rigup-mode"
    survey([*(f"{UNIT_DIR}/{t}" for t in MODES.values()), f"{p.prefix}/bin", command, COMMAND_LINK])
    changed = []
    for mode, target in MODES.items():
        others = [t for m, t in MODES.items() if m != mode]
        changed.append(
            template_placed(
                name=f"Unit {target}",
                src=str(FILES / "modes" / "rigup-mode.target.j2"),
                dest=f"{UNIT_DIR}/{target}",
                mode="644",
                mode_name=mode,
                services=services[mode],
                others=others,
                # one ordering edge between the two targets is enough (and avoids a cycle)
                order_after=mode != next(iter(MODES)),
            )
        )
    directory_placed(name=f"Directory {p.prefix}/bin", path=f"{p.prefix}/bin", mode="755")
    template_placed(
        name="Switch command rigup-mode",
        src=str(FILES / "modes" / "rigup-mode.j2"),
        dest=command,
        mode="755",
        modes=services,
        names=list(MODES),
        default=data.rigup_mode,
        rigup_start=rigup_start(settings),
    )
    link_placed(name=f"Link {COMMAND_LINK}", path=COMMAND_LINK, target=command)
    systemd.daemon_reload(name="systemd daemon-reload (mode targets)", _if=any_changed(*changed))
    for mode, target in MODES.items():
        boot = mode == data.rigup_mode
        systemd.service(
            name=f"{target} {'is' if boot else 'is not'} the boot mode",
            service=target,
            running=None,
            enabled=boot,
        )
    mode_active(
        name=f"A mode is running ({data.rigup_mode} when none is)",
        default_target=MODES[data.rigup_mode],
        targets=list(MODES.values()),
        rigup_start=rigup_start(settings),
    )
