"""What every check of rigup-doctor shares: the configuration, the runner and fetch, the
sections and their :class:`Section`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rigup import diagnosis, units

Runner = Callable[[list[str]], tuple[int, str]]
Fetch = Callable[[str], tuple[int, str]]

CONFIG = "/etc/rigup/doctor/doctor.json"

#: The sections of a diagnosis, in the order they print (``boot``: how the previous boot ended;
#: ``cluster`` only on a rig of a cluster of rigs: doctor.json has a ``cluster`` key).
SECTIONS = (
    "boot",
    "driver",
    "gpus",
    "nvlink",
    "services",
    "metrics",
    "cluster",
    "disk",
    "venvs",
)

#: What rigup-doctor reads of each GPU besides rigup's own query (nvidia-smi --help-query-gpu).
TELEMETRY_FIELDS = (
    "index",
    "memory.total",
    "memory.used",
    "temperature.gpu",
    "clocks.sm",
    "clocks.max.sm",
    "power.draw",
    "clocks_event_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
)
APPS_QUERY = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"


def run(argv: list[str], timeout: float = 60) -> tuple[int, str]:
    """Run a command: ``(exit status, stdout + stderr)``; 127 missing, 124 timed out."""
    return units.run(argv, timeout)


def fetch(url: str, timeout: float = 10, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """``GET url``: ``(HTTP status, body)``; ``(0, reason)`` when nothing answered."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (loopback URLs)
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


class ConfigError(Exception):
    """doctor.json cannot be read; the message says why and what to run."""


def load_config(path: str = CONFIG) -> dict[str, Any]:
    """What rigup knows of this host (``doctor.json``, written by a converge: roles/doctor).
    Raises :class:`ConfigError` naming the file when it is absent, unreadable or not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"{path} does not exist: rigup has not converged this host yet (a converge writes "
            "it). Run the deploy first: .venv/bin/pyinfra inventory/rig.py deploys/full.py"
        ) from None
    except PermissionError:
        raise ConfigError(f"{path} is not readable by this user: run it with sudo") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} cannot be read ({exc}): converge again to write it anew"
        ) from None


@dataclass
class Section:
    """One part of the diagnosis: its verdicts and the facts they were read from."""

    name: str
    verdicts: list[diagnosis.Verdict] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return diagnosis.worst(self.verdicts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "verdicts": [v.as_dict() for v in self.verdicts],
            "facts": self.facts,
        }
