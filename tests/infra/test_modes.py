"""GPU modes: both targets installed and conflicting, the boot mode enabled, exactly one mode
active, every installed service linked to its mode, and the switch command on root's PATH."""

import pytest

from roles.modes import COMMAND_LINK, mode_services
from roles.modes.budget import MODES
from roles.services import by_unit


def _props(host, unit: str, *names: str) -> dict[str, str]:
    out = host.run(f"systemctl show {unit} " + " ".join(f"-p {n}" for n in names))
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


@pytest.mark.parametrize("mode", list(MODES))
def test_target_installed_and_conflicting(host, mode):
    target = MODES[mode]
    props = _props(host, target, "LoadState", "Conflicts")
    assert props.get("LoadState") == "loaded", f"{target} is not installed: run deploys/modes.py"
    others = [t for m, t in MODES.items() if m != mode]
    for other in others:
        assert other in props.get("Conflicts", ""), f"{target} does not conflict with {other}"


def test_boot_mode_is_the_setting(host, data):
    for mode, target in MODES.items():
        state = host.run(f"systemctl is-enabled {target}").stdout.strip()
        want = "enabled" if mode == data.get("rigup_mode") else "disabled"
        assert state == want, f"{target} is {state}, expected {want} (rigup_mode)"


def test_exactly_one_mode_is_active(host):
    active = [t for t in MODES.values() if host.run(f"systemctl is-active {t}").rc == 0]
    assert len(active) == 1, f"active mode targets: {active} (run deploys/modes.py)"


def test_each_installed_service_belongs_to_its_mode(host, data):
    for mode, services in mode_services(data).items():
        for service in services:
            props = _props(host, service, "PartOf", "LoadState")
            assert props.get("LoadState") == "loaded", f"{service} is not installed"
            assert by_unit(service).target in props.get("PartOf", ""), (
                f"{service} is not PartOf={MODES[mode]}: re-run its deploy"
            )


def test_switch_command(host, data):
    cmd = host.file(COMMAND_LINK)
    assert cmd.is_symlink, f"{COMMAND_LINK} is missing: run deploys/modes.py"
    out = host.run(COMMAND_LINK)
    assert out.rc == 0, out.stderr
    active = [m for m, t in MODES.items() if host.run(f"systemctl is-active {t}").rc == 0]
    assert f"mode: {active[0] if active else 'none'} (boot default: {data.get('rigup_mode')})" in (
        out.stdout
    )
    bad = host.run(f"{COMMAND_LINK} turbo")
    assert bad.rc == 2 and "usage: rigup-mode" in bad.stderr


def test_every_running_service_runs_what_is_on_disk(host, data):
    """A running service whose unit, environment file or inputs changed after it started (a
    converge interrupted between writing them and its restart) fails here, with the files; the
    next converge restarts it (roles/common/service.py, roles.common.facts.UnitStartedBefore)."""
    import shlex

    from rigup import units

    def runner(argv: list[str]) -> tuple[int, str]:
        out = host.run(shlex.join(argv))
        return out.rc, out.stdout + out.stderr

    stale = []
    for services in mode_services(data).values():
        for unit in services:
            state, _ = units.read_unit(unit, runner)
            if state.get("changed_inputs") or state.get("need_reload"):
                stale.append(
                    f"{unit}: {', '.join(state.get('changed_inputs') or ['NeedDaemonReload=yes'])}"
                )
    assert not stale, (
        "running an older configuration than the one on disk (converge): " + "; ".join(stale)
    )
