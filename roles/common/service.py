"""The skeleton every rigup GPU service role runs (vLLM, ComfyUI, VoxCPM2).

A role describes what differs in a :class:`ServiceSpec` and calls the steps of
:class:`GpuService` in its ``@deploy``: the service account, its directories, a locked venv,
files and checks, then :meth:`GpuService.install` renders the one env file template and the one
hardened unit template (files/common/service.env.j2, files/common/service.unit.j2), reloads
systemd when a unit changed and puts the unit in its state: linked into its GPU mode's target
where it can run and restarted, when running, if anything it runs changed; elsewhere installed,
stopped and disabled with the reason printed.

Every operation that changes what the service runs is tracked (as chatmail's ``Deployer`` tracks
``need_restart``), so no role keeps its own ``any_changed(...)`` list.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import File
from pyinfra.operations import server, systemd
from pyinfra.operations.util import any_changed

from roles.common.facts import ListeningSockets, UnitStartedBefore, UnitState
from roles.common.footprint import DiskNeeds, ServiceFootprint
from roles.common.libraries import host_package
from roles.common.operations import check_passes, secret_file, service_account
from roles.common.paths import LINK_DIR, Layout, ServicePaths
from roles.common.placed import (
    directory_placed,
    file_absent,
    file_placed,
    link_placed,
    survey,
    template_placed,
)
from roles.common.preflight import require_free_space, service_space_needs
from roles.common.urls import is_loopback, local_probe_url, port_holders
from roles.common.venv import LockedVenv, locked_venv

FILES = Path(__file__).resolve().parents[2] / "files" / "common"
UNIT_DIR = "/etc/systemd/system"
#: Jinja options for rigup's templates: a block tag on its own line leaves no blank line.
JINJA = {"trim_blocks": True, "lstrip_blocks": True}


def api_key_or_refuse(
    component: str, host_key: str, bind: str, key_env: str, key: str | None, key_file: str
) -> str | None:
    """The service's API key from the controller (``key``, read from ``$key_env``), or None.

    Raises ``DeployError`` (before any change) when the service binds beyond loopback
    (``bind``, the setting ``host_key``) and has no key: neither ``key`` nor one stored on the
    host at ``key_file`` by an earlier run. Reads a fact: call inside a deploy.
    """
    if is_loopback(bind) or key or host.get_fact(File, path=key_file):
        return key or None
    raise DeployError(
        f"{host_key} is {bind}, not loopback, and {component} has no API key: anyone who reaches "
        f"the port could use it. Set ${key_env} on the controller (it is stored 0600 on the "
        f"host, never printed) or bind {host_key} to 127.0.0.1 (nothing was changed)"
    )


@dataclass(frozen=True)
class ServiceSpec:
    """What one GPU service is; everything else is the same for all of them.

    + unit: ``vllm.service``; role: ``roles/vllm`` (named in managed files); component: "vLLM"
    + mode, target: the GPU mode that runs it and that mode's systemd target (roles/modes)
    + user, home: the service account and its home (state, caches; always writable)
    + env_file, env: the 0640 environment file and its variables
    + description, documentation: the unit's [Unit] texts
    + exec_start: the ``ExecStart=`` value (:func:`exec_line`)
    + bind, port, ready_path: where it listens (port_key: the setting of the port); readiness is ``GET <ready_path>`` answering 200
      (from this unit's process when ``ready_pid_key`` names the JSON field holding its pid)
    + start_timeout_s: seconds for ``systemctl start`` (model load included)
    + read_write_paths: more writable directories; working_directory: default ``home``
    + requires (with requires_comment): more units it needs and orders after
    + optional_env_files: ``(comment, path)`` of environment files that may be absent
    + stop_timeout_s, restart_sec: TimeoutStopSec=, RestartSec= (the unit has Restart=always)
    + restart_prevent_exit_status (with restart_prevent_comment): exit statuses that mean a
      restart cannot help (a wrong model directory): the unit fails instead of looping
    + ready_path "": no readiness URL (a headless vLLM follower): started once it runs;
      ready_exec: the ExecStartPost= command that decides readiness instead of wait-ready
    + peer_addresses: other rigs of its cluster (roles/cluster), allowed past the loopback-only
      IPAddressDeny= of a unit bound to loopback
    + connects_out: it connects to other hosts (the router to its replica rigs), so a loopback
      bind does not confine it to localhost (no ``IPAddressDeny=any``)
    + disk: the free space a start and a venv build need (its footprint's
      :class:`roles.common.footprint.DiskNeeds`); None: not checked
    """

    unit: str
    role: str
    component: str
    mode: str
    target: str
    user: str
    home: str
    env_file: str
    env: dict[str, str]
    description: str
    documentation: str
    exec_start: str
    bind: str
    port: int
    port_key: str
    ready_path: str
    start_timeout_s: int
    ready_pid_key: str = ""
    read_write_paths: tuple[str, ...] = ()
    working_directory: str = ""
    requires: tuple[str, ...] = ()
    requires_comment: str = ""
    optional_env_files: tuple[tuple[str, str], ...] = ()
    stop_timeout_s: int = 60
    restart_sec: int = 10
    restart_prevent_exit_status: tuple[int, ...] = ()
    restart_prevent_comment: str = ""
    # many rigs (roles/cluster): the peer rigs' addresses a loopback-bound unit may still reach,
    # and a readiness command instead of wait-ready's GET (a 1-token completion on a leader)
    peer_addresses: tuple[str, ...] = ()
    ready_exec: str = ""
    connects_out: bool = False
    disk: DiskNeeds | None = None

    @classmethod
    def of(
        cls, settings: Any, paths: ServicePaths, footprint: ServiceFootprint, **differs: Any
    ) -> ServiceSpec:
        """The spec of the service ``footprint`` declares (roles/<role>/footprint.py): its unit,
        role, component, mode and readiness probe from there, its account, bind address, port
        and start timeout read from the settings its ``keys`` name, its directories from
        ``paths``; ``differs`` gives the rest and overrides any of those (a headless vLLM follower
        has no ``ready_path``)."""
        keys = footprint.keys
        fields: dict[str, Any] = dict(
            unit=footprint.unit,
            role=footprint.role,
            component=footprint.component,
            mode=footprint.mode,
            target=footprint.target,
            ready_path=footprint.ready_path,
            user=settings.get(keys.user),
            home=paths.home,
            env_file=paths.env_file,
            bind=str(settings.get(keys.host)),
            port=settings.get(keys.port),
            port_key=keys.port,
            start_timeout_s=settings.get(keys.start_timeout_s),
            disk=footprint.disk,
        )
        return cls(**{**fields, **differs})

    @property
    def ready_url(self) -> str:
        """The readiness URL as probed from the host itself."""
        return local_probe_url(self.bind, self.port, self.ready_path)

    @property
    def localhost_only(self) -> bool:
        """Whether its unit confines it to localhost (``IPAddressDeny=any``): bound to loopback
        and connecting to no other host."""
        return is_loopback(self.bind) and not self.connects_out

    @property
    def unit_path(self) -> str:
        return f"{UNIT_DIR}/{self.unit}"


@dataclass
class GpuService:
    """The steps of a GPU service role, in order; call them inside the role's ``@deploy``.

    + settings: the host's checked settings; spec: the :class:`ServiceSpec`
    + changes: operations whose change means the running service must restart (tracked by the
      steps; a role adds its own with :meth:`track`)
    + inputs: the files those operations write (compared with the running service's start:
      :class:`roles.common.facts.UnitStartedBefore`)
    """

    settings: Any
    spec: ServiceSpec
    changes: list[OperationMeta] = field(default_factory=list)
    software: list[OperationMeta] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    venvs: list[tuple[OperationMeta, str]] = field(default_factory=list)

    @property
    def layout(self) -> Layout:
        return Layout.from_data(self.settings)

    def track(
        self, *ops: OperationMeta, software: bool = False, paths: tuple[str, ...] = ()
    ) -> None:
        """Restart the running service when any of ``ops`` changed; ``software``: they change
        what is installed, so the on-host checks run again too; ``paths``: the files they write,
        which a later run compares with the running service's start (an interrupted run)."""
        self.changes.extend(ops)
        self.inputs.extend(paths)
        if software:
            self.software.extend(ops)

    def account(self, comment: str) -> None:
        """System user (no login; group ``video`` for /dev/nvidia* when it uses the GPUs) with
        its home (0750) and ``home/tmp`` (0700), both owned by it."""
        user, home = self.spec.user, self.spec.home
        survey((home, f"{home}/tmp"))
        service_account(
            name=f"Service user {user}",
            user=user,
            home=home,
            shell="/usr/sbin/nologin",
            groups=("video",) if self.spec.mode else (),
            comment=comment,
        )
        directory_placed(name=f"Directory {home}", path=home, user=user, group=user, mode="750")
        directory_placed(
            name=f"Directory {home}/tmp", path=f"{home}/tmp", user=user, group=user, mode="700"
        )

    def directories(
        self, root_owned: tuple[str, ...] = (), owned: tuple[tuple[str, str], ...] = ()
    ):
        """``root_owned`` directories (0755, the software's) and ``owned`` ``(path, mode)``
        directories of the service user (its data). Never their content."""
        survey([*root_owned, *(path for path, _ in owned)])
        for path in root_owned:
            directory_placed(
                name=f"Directory {path}", path=path, user="root", group="root", mode="755"
            )
        user = self.spec.user
        for path, mode in owned:
            directory_placed(name=f"Directory {path}", path=path, user=user, group=user, mode=mode)

    def venv(self, **venv_args: Any) -> LockedVenv:
        """The service's locked venv, tracked: :func:`roles.common.venv.locked_venv` with
        ``venv_args`` (what, contents, lock_src, lock, venv, python, mislabelled)."""
        built: LockedVenv = locked_venv(self.settings, **venv_args)
        self.track(built.lock, built.venv, software=True, paths=(venv_args["lock"],))
        self.venvs.append((built.venv, built.path))
        return built

    def api_key(self, key: str | None, key_env: str, secrets_dir: str, key_file: str, var: str):
        """The root-only ``secrets_dir`` (0700) and ``key_file`` (root, 0600) holding
        ``var=<key>`` for the unit's ``EnvironmentFile=-`` (systemd reads it as root; the key
        never appears in argv, the unit or pyinfra's output, ``--diff`` included); tracked.
        ``key`` None (``$key_env`` unset on the controller) leaves the file as it is."""
        directory_placed(
            name=f"Directory {secrets_dir}", path=secrets_dir, user="root", group="root", mode="700"
        )
        self.track(
            secret_file(
                name=f"{self.spec.component} API key from ${key_env} (0600)",
                path=key_file,
                secret=f"{var}={key}\n" if key else None,
                what=f"{self.spec.component} API key (${key_env})",
            ),
            paths=(key_file,),
        )

    def put(self, name: str, src: Path | StringIO, dest: str, mode: str = "644"):
        """A root-owned file the service runs or reads (a script, its argv JSON), tracked."""
        op = file_placed(
            name=name, src=src if isinstance(src, StringIO) else str(src), dest=dest, mode=mode
        )
        self.track(op, paths=(dest,))
        return op

    def check(
        self, name: str, command: str, stamp: str, key: str, what: str, watch: tuple[str, ...] = ()
    ):
        """An on-host check that must pass (:func:`roles.common.operations.check_passes`);
        it runs again when ``key`` or a ``watch`` file changes and after the software changed."""
        if self.software:
            file_absent(
                name=f"Forget {stamp} (venv rebuilt)",
                path=stamp,
                _if=any_changed(*self.software),
            )
        return check_passes(
            name=name, command=command, stamp=stamp, key=key, what=what, watch=watch
        )

    def as_user(self, **env: str) -> str:
        """``runuser -u <user> -- env HOME=... TMPDIR=... K=V`` prefix for a check that must see
        what the service sees (its permissions, offline hubs)."""
        home = self.spec.home
        words = [f"HOME={home}", f"TMPDIR={home}/tmp", *(f"{k}={v}" for k, v in env.items())]
        return f"runuser -u {shlex.quote(self.spec.user)} -- env " + " ".join(
            shlex.quote(w) for w in words
        )

    def install(self, blocker: str | None, hint: str = "") -> OperationMeta:
        """Env file, unit, daemon-reload, and the unit's state in its GPU mode.

        ``blocker`` None: the service can run here; it is linked into its mode's target (the
        modes deploy starts it with that mode) and restarted, when running, if anything tracked
        changed. Otherwise it is installed, stopped and disabled, and the run says why:
        "<component>: <blocker>: <unit> is installed and checked but not started ... <hint>".
        Returns the unit file's operation.
        """
        s = self.spec
        target = s.target
        if blocker is None:
            require_port_free(s)
        survey((s.env_file, s.unit_path))
        env_file = template_placed(
            name=f"{s.component} environment file",
            src=str(FILES / "service.env.j2"),
            dest=s.env_file,
            user="root",
            group=s.user,
            mode="640",
            role=s.role,
            unit=s.unit,
            env=s.env,
            jinja_env_kwargs=dict(JINJA),
        )
        unit = template_placed(
            name=f"Unit {s.unit}",
            src=str(FILES / "service.unit.j2"),
            dest=s.unit_path,
            mode="644",
            s=s,
            target=target,
            after_extra="".join(f" {u}" for u in s.requires),
            pid_key=f" {s.ready_pid_key}" if s.ready_pid_key else "",
            writable=[s.home, *s.read_write_paths],
            wait_ready=f"{self.layout.prefix}/bin/wait-ready",
            loopback_only=s.localhost_only,
            jinja_env_kwargs=dict(JINJA),
        )
        self.track(env_file, unit, paths=(s.env_file, s.unit_path))
        # what the running service started with, against what is on disk now (before this run's
        # changes): a run interrupted between writing its files and restarting it left it older
        stale = host.get_fact(UnitStartedBefore, unit=s.unit, paths=tuple(self.inputs))
        if stale and stale["need_reload"]:
            systemd.daemon_reload(name=f"systemd daemon-reload ({s.unit}'s unit changed on disk)")
        else:
            systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)
        restart_if = any_changed(*self.changes)
        if stale and (stale["changed"] or stale["need_reload"]):
            restart_if = None  # restart whatever this run changes: it runs an older configuration
            logger.warning(
                f"[{host.name}] {s.unit} runs an older configuration than the one on disk "
                f"({', '.join(stale['changed']) or 'NeedDaemonReload=yes'} changed since it "
                "started): restarting it"
            )
        # before any change: room on the file systems a restart and a venv sync write
        starts = blocker is None and (
            restart_if is None or any(o.will_change for o in self.changes)
        )
        if s.mode and starts:  # a GPU service is restarted only when it runs (its mode starts it)
            state = host.get_fact(UnitState, unit=s.unit) or {"active": "inactive"}
            starts = state["active"] in ("active", "activating", "reloading")
        venvs = [(venv, op.will_change) for op, venv in self.venvs]
        needs, changes = service_space_needs(s, self.layout.uv_cache, venvs, starts)
        require_free_space(needs, " and ".join(changes))
        if not s.mode:  # a service that uses no GPU (the router): started at boot, in no mode
            boot_unit_state(s, restart_if)
            return unit
        mode_unit_state(s, target, blocker, restart_if, unit, rigup_start(self.settings), hint)
        return unit


def require_port_free(spec: ServiceSpec) -> None:
    """Raise ``DeployError`` (before any change) when another process listens where ``spec``'s
    server would (``spec.bind``:``spec.port``): the server could not start. Its own unit's
    processes do not count. Reads a fact: call inside a deploy."""
    sockets = host.get_fact(ListeningSockets)
    if sockets is None:
        logger.warning(f"[{host.name}] no ss (iproute2) on the host: {spec.port} not checked")
        return
    holders = port_holders(sockets, spec.bind, spec.port, spec.unit)
    if holders:
        raise DeployError(
            f"{spec.port_key}: {spec.port} is already taken on {host.name} by "
            f"{'; '.join(holders)}, so {spec.unit} could not listen on {spec.bind}:{spec.port}. "
            f"Choose another {spec.port_key} or stop what holds it (nothing was changed)"
        )


def service_tools(settings: Any) -> None:
    """``<prefix>/bin/wait-ready`` (the readiness wait of every service unit, ExecStartPost=),
    ``<prefix>/bin/rigup-start`` (start or restart units, failing with the journal unless
    each is up afterwards) and ``<prefix>/bin/rigup-explain`` (why a unit is not up: the
    diagnosis table's verdicts, which rigup-start prints; linked in ``/usr/local/bin`` so a user
    runs it by name), with the package it imports (rigup: rigup.units, rigup.diagnosis) in
    ``<prefix>/lib``."""
    layout = Layout.from_data(settings)
    scripts = ("wait-ready", "rigup-start", "rigup-explain")
    explain = f"{LINK_DIR}/rigup-explain"
    survey([layout.bin, layout.lib, explain, *(f"{layout.bin}/{script}" for script in scripts)])
    for path in (layout.bin, layout.lib):
        directory_placed(name=f"Directory {path}", path=path, mode="755")
    host_package(layout.lib)
    for script, what in (
        ("wait-ready", "service readiness"),
        ("rigup-start", "honest starts"),
        ("rigup-explain", "why a unit is not up"),
    ):
        file_placed(
            name=f"Script {script} ({what})",
            src=str(FILES / script),
            dest=f"{layout.bin}/{script}",
            mode="755",
        )
    link_placed(name=f"{explain} on PATH", path=explain, target=f"{layout.bin}/rigup-explain")


def rigup_start(settings: Any) -> str:
    """Path of the ``rigup-start`` script on the host."""
    return f"{Layout.from_data(settings).prefix}/bin/rigup-start"


@operation()
def restarted_if_up(unit: str, rigup_start: str):
    """Restart ``unit`` when it is running or starting (``activating``: a start may hang on a
    unit file that this run replaced), through ``rigup-start --restart`` (fails with the
    journal unless the unit is up afterwards). A stopped unit is left to its mode."""
    state = host.get_fact(UnitState, unit=unit) or {"active": "inactive", "sub": "dead"}
    if state["active"] not in ("active", "activating", "reloading"):
        host.noop(f"{unit} is {state['active']}: its mode starts it")
        return
    yield f"{shlex.quote(rigup_start)} --restart {shlex.quote(unit)}"


def boot_unit_state(spec: ServiceSpec, restart_if) -> None:
    """A service that uses no GPU (``spec.mode`` empty: roles.common.footprint.NO_GPU):
    enabled in its target (multi-user.target), running, and restarted when ``restart_if``
    (anything it runs changed; None: unconditionally, it runs an older configuration)."""
    systemd.service(
        name=f"{spec.unit} enabled at boot and running",
        service=spec.unit,
        running=True,
        enabled=True,
    )
    systemd.service(
        name=f"Restart {spec.unit} (its inputs changed)",
        service=spec.unit,
        running=True,
        restarted=True,
        _if=restart_if,
    )


def mode_unit_state(
    spec: ServiceSpec, target: str, blocker, restart_if, unit_op, start_script: str, hint=""
) -> None:
    """State of a service in its GPU mode (roles/modes); see :meth:`GpuService.install`
    (``restart_if`` None: restart it if running, unconditionally)."""
    unit = spec.unit
    if blocker is None:
        systemd.service(
            name=f"{unit} enabled in {target} (runs in the {spec.mode} mode)",
            service=unit,
            running=None,
            enabled=True,
        )
        server.shell(
            name=f"Re-link {unit} into {target} (its [Install] section may have changed)",
            commands=[f"systemctl reenable {unit}"],
            _if=unit_op.did_change,
        )
        restarted_if_up(
            name=f"Restart {unit} if running (its inputs changed)",
            unit=unit,
            rigup_start=start_script,
            _if=restart_if,
        )
        return
    logger.warning(
        f"[{host.name}] {spec.component}: {blocker}: {unit} is installed and checked but not "
        f"started (kept stopped and out of {target}{'; ' + hint if hint else ''})."
    )
    systemd.service(
        name=f"{unit} installed, not started (no GPUs or no driver)",
        service=unit,
        running=False,
        enabled=False,
    )
