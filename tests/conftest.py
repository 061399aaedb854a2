"""Shared test helpers: the repository root on sys.path (as pyinfra puts it when run from there)
and the settings from inventory/group_data/all.py as a plain dict."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def load_group_data() -> dict:
    """The public names of inventory/group_data/all.py, as pyinfra loads them."""
    module = runpy.run_path(str(REPO / "inventory" / "group_data" / "all.py"))
    return {k: v for k, v in module.items() if not k.startswith("_")}


class Settings(dict):
    """Settings as a dict that also answers ``settings.key`` like pyinfra's ``host.data``."""

    def __getattr__(self, key: str):
        try:
            return self[key]
        except KeyError as e:
            raise AttributeError(key) from e


@pytest.fixture
def settings() -> Settings:
    """A fresh copy of the shipped settings (tests may mutate it)."""
    return Settings(load_group_data())


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist's scheduler for bin/rigup-test: each lab machine's group of modules
    (tests/lab/labtools.py ``MACHINE_GROUPS``) is one unit of work, kept on one worker in file
    order; every other test is a unit of its own. (pytest-xdist's ``--dist loadgroup`` would
    do this from ``xdist_group`` marks, but its rename of the test ids has no effect on pytest
    9's ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    from tests.lab.labtools import machine_group

    class ByMachine(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return machine_group(nodeid) or nodeid

    return ByMachine(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (bin/rigup-test: ``-n 2 --no-loadscope-reorder``) the scheduler hands
    out work in collection order, the next unit to whichever worker runs dry: the two session
    lab machines' groups first (the longest, mostly waiting on the machines), one per worker
    from the start; then the other machines' groups (their template and wheels warm by then);
    then the lab's machineless checks (the CUDA build's, minutes long: early, so they never
    end the run alone); then the controller's tests, small units that even out the workers'
    ends. A run without xdist keeps pytest's order."""
    if not hasattr(config, "workerinput"):  # only xdist's workers collect for the scheduler
        return
    from tests.lab.labtools import MACHINELESS, SESSION_MACHINE_GROUPS, machine_group

    def rank(item: pytest.Item) -> int:
        group = machine_group(item.nodeid)
        if group in SESSION_MACHINE_GROUPS:
            return 0
        if group is not None:
            return 1
        return 2 if item.nodeid.split("::", 1)[0] in MACHINELESS else 3

    items.sort(key=rank)  # stable: pytest's order inside each rank
