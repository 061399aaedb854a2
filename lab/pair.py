"""The lab pair: two lab machines, each booted in a network namespace of its own, joined by a
bridge (lab/pairnet.py), reached by the controller through the pair's relay (lab/relay.py): the
two rigs of docs/many-rigs.md on one controller, with nothing routed out of it.

Settings (environment, as the single lab's ``RIGUP_LAB_*``):

- ``RIGUP_LAB_PAIR``: the pair's name (default ``rigs``); its machines are ``<pair>-a`` (rank 0,
  the leader) and ``<pair>-b``, its namespaces ``<pair>-link``, ``<pair>-a``, ``<pair>-b``;
- ``RIGUP_LAB_SSH_PORT``: rig a's SSH port on 127.0.0.1 (default 2301), rig b's is the next;
- ``RIGUP_LAB_STATE_DIR``: the directory holding each machine's state directory and the pair's
  own (default ``/var/lib/rigup-lab/<pair>``);
- ``RIGUP_LAB_CACHE_DIR``, ``RIGUP_LAB_SUITE``, ``RIGUP_LAB_MIRROR``, ``RIGUP_LAB_UV_CACHE``: as
  for one machine (the same cached template and uv cache).

Standard library only (as lab.machine).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from lab.config import DEFAULT_STATE_ROOT, LabConfig, LabError
from lab.host import check_root, pid_alive, proc_cmdline, rmtree, run, tail
from lab.machine import LabMachine
from lab.pairnet import (
    NETNS_DIR,
    PairNet,
    down_argvs,
    leftover_namespaces,
    plan,
    relay_routes,
    up_argvs,
)

DEFAULT_PAIR = "rigs"
DEFAULT_PAIR_SSH_PORT = 2301


def _stderr_log(message: str) -> None:
    print(f"lab pair: {message}", file=sys.stderr, flush=True)


def pair_configs(env: Mapping[str, str] | None = None) -> tuple[PairNet, list[LabConfig], Path]:
    """The pair's network plan, its machines' configurations (rank order) and the pair's own
    state directory, from the environment (module docstring).

    Raises:
        LabError: a variable holds a value that cannot be used.
    """
    env = dict(os.environ if env is None else env)
    pair = env.get("RIGUP_LAB_PAIR", "") or DEFAULT_PAIR
    root = Path(env.get("RIGUP_LAB_STATE_DIR", "") or DEFAULT_STATE_ROOT / pair).absolute()
    port_text = env.get("RIGUP_LAB_SSH_PORT", "") or str(DEFAULT_PAIR_SSH_PORT)
    names = (f"{pair}-a", f"{pair}-b")
    net = plan(pair, names)
    configs = []
    for i, rig in enumerate(net.rigs):
        one = {
            **env,
            "RIGUP_LAB_NAME": rig.name,
            "RIGUP_LAB_STATE_DIR": str(root / rig.name),
            "RIGUP_LAB_SSH_PORT": str(int(port_text) + i) if port_text.isdigit() else port_text,
        }
        cfg = LabConfig.from_env(one)
        configs.append(
            dataclasses.replace(
                cfg, netns=rig.netns, address=rig.address, extra_hosts=net.hosts_lines()
            )
        )
    return net, configs, root / "pair"


class LabPair:
    """The two machines of the pair, their network and relay: up, destroy.

    Args:
        env: the settings (default: ``os.environ``; module docstring).
        log: receives one-line progress messages.
    """

    RELAY_TIMEOUT = 10.0

    def __init__(
        self, env: Mapping[str, str] | None = None, log: Callable[[str], None] | None = None
    ) -> None:
        self.net, configs, self.state_dir = pair_configs(env)
        self.log = log or _stderr_log
        self.machines = [LabMachine(cfg, self.log) for cfg in configs]

    @property
    def leader(self) -> LabMachine:
        return self.machines[0]

    @property
    def follower(self) -> LabMachine:
        return self.machines[1]

    # -- the network -------------------------------------------------------------------------

    def _existing_namespaces(self) -> list[str]:
        try:
            return sorted(os.listdir(NETNS_DIR))
        except FileNotFoundError:
            return []

    def network_up(self) -> None:
        """Make the pair's namespaces, bridge and links, unless all of them are there."""
        present = leftover_namespaces(self.net, self._existing_namespaces())
        if len(present) == len(self.net.namespaces):
            return
        self._network_down(present)
        started = time.monotonic()
        for argv in up_argvs(self.net):
            run(argv, "making the lab pair's network")
        self.log(
            f"network {self.net.subnet} in namespaces {', '.join(self.net.namespaces)} in "
            f"{time.monotonic() - started:.1f} s"
        )

    def _network_down(self, namespaces: list[str]) -> None:
        for argv in down_argvs(namespaces):
            run(argv, "removing the lab pair's network")

    # -- the relay ---------------------------------------------------------------------------

    @property
    def _relay_spec(self) -> Path:
        return self.state_dir / "relay.json"

    @property
    def _relay_pid(self) -> Path:
        return self.state_dir / "relay.pid"

    def relay_pid(self) -> int | None:
        """PID of the pair's running relay, or None."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(self._relay_pid.read_text())
            if pid_alive(pid) and str(self._relay_spec) in proc_cmdline(pid):
                return pid
        return None

    def relay_up(self) -> None:
        """Start the relay (lab/relay.py) unless it runs; wait until it listens."""
        if self.relay_pid() is not None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ports = {m.cfg.name: m.cfg.ssh_port for m in self.machines}
        self._relay_spec.write_text(json.dumps(relay_routes(self.net, ports), indent=1))
        log = self.state_dir / "relay.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lab.relay", str(self._relay_spec)],
                cwd=Path(__file__).resolve().parents[1],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        self._relay_pid.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + self.RELAY_TIMEOUT
        while "listening" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"the lab pair's relay did not start. {log}:\n{tail(log)}")
            time.sleep(0.1)

    def _relay_down(self) -> None:
        pid = self.relay_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)

    # -- the pair ----------------------------------------------------------------------------

    def up(self) -> float:
        """Network, relay, then both machines SSH-ready (each as :meth:`LabMachine.up`).
        Returns the seconds it took.

        Raises:
            LabError: not root, a machine or the relay did not start (with its log's tail).
        """
        started = time.monotonic()
        check_root()
        self.network_up()
        self.relay_up()
        for machine in self.machines:
            machine.up()
        seconds = time.monotonic() - started
        self.log(f"pair {self.net.pair} up in {seconds:.1f} s")
        return seconds

    def destroy(self) -> None:
        """Stop and remove both machines, the relay, the namespaces and the pair's state; also
        what an interrupted run left (run it before :meth:`up` for a clean start)."""
        check_root()
        for machine in self.machines:
            machine.destroy()
        self._relay_down()
        self._network_down(leftover_namespaces(self.net, self._existing_namespaces()))
        if self.state_dir.exists():
            rmtree(self.state_dir)
        self.log(f"pair {self.net.pair} destroyed")
