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
