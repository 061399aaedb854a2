"""The converge's free-space preflight: roles/common/preflight.py's FreeSpace
fact on ``df`` as the lab machine printed it, the needs of a service's changes
(roles/common/footprint.py DiskNeeds, every service), and the refusal's words."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roles.common.footprint import START_FLOOR_GIB, DiskNeeds
from roles.common.preflight import (
    FreeSpace,
    SpaceNeed,
    free_space_problems,
    service_space_needs,
)
from roles.router.footprint import FOOTPRINT as ROUTER
from roles.services import SERVICES
from tests.captures import blocks

#: the lab's capture: a 64 MiB tmpfs over vLLM's TMPDIR with 63 MiB written, the rest on /
CAPTURE = blocks("lab/freespace-tmpfs-full.txt")[0]


def test_free_space_reads_each_path_and_its_nearest_existing_parent():
    free = FreeSpace().process(CAPTURE.lines)
    assert set(free) == {
        "/var/lib/rigup/vllm/tmp",
        "/var/lib/rigup/vllm",
        "/var/cache/rigup/uv",
        "/opt/rigup/vllm/venv",
        "/var/lib/rigup/vllm/not-made-yet",  # df of /var/lib/rigup/vllm, its existing parent
    }
    tmp = free["/var/lib/rigup/vllm/tmp"]
    assert tmp["mount"] == "/var/lib/rigup/vllm/tmp"
    assert (tmp["free_bytes"], tmp["size_bytes"]) == (1048576, 67108864)
    assert free["/var/lib/rigup/vllm/not-made-yet"]["mount"] == "/"
    assert free["/var/lib/rigup/vllm"]["free_bytes"] == 42280345600


def test_the_fact_command_is_the_captured_one_and_quotes_paths():
    assert FreeSpace().command(paths=tuple(
        line[3:] for line in CAPTURE.lines if line.startswith("== ")
    )) == CAPTURE.command  # fmt: skip
    assert "'/srv/my models'" in FreeSpace().command(paths=("/srv/my models",))
    assert FreeSpace().process(["== /nowhere", "df: /nowhere: No such file or directory"]) == {}


def _spec(**disk) -> SimpleNamespace:
    return SimpleNamespace(
        unit="vllm.service",
        component="vLLM",
        home="/var/lib/rigup/vllm",
        read_write_paths=("/srv/rigup/out",),
        disk=DiskNeeds(**{"start_gib": 2.0, "start_source": "s", "venv_gib": 5.0,
                          "venv_source": "v", **disk}),
    )  # fmt: skip


def test_a_restart_needs_room_on_each_file_system_it_writes_a_venv_sync_on_the_cache_and_venv():
    needs, changes = service_space_needs(
        _spec(), "/var/cache/rigup/uv", [("/opt/rigup/vllm/venv", True)], starts=True
    )
    assert changes == ["restart vllm.service", "sync vLLM's venv /opt/rigup/vllm/venv"]
    assert [(n.path, n.gib) for n in needs] == [
        ("/var/lib/rigup/vllm/tmp", 2.0),
        ("/var/lib/rigup/vllm", 2.0),
        ("/srv/rigup/out", 2.0),
        ("/var/cache/rigup/uv", 5.0),
        ("/opt/rigup/vllm/venv", 5.0),
    ]
    assert service_space_needs(_spec(), "/c", [("/v", False)], starts=False) == ([], [])
    assert service_space_needs(SimpleNamespace(disk=None), "/c", [("/v", True)], True) == ([], [])


def test_needs_on_one_file_system_add_up_each_counted_once():
    needs, _ = service_space_needs(
        _spec(), "/var/cache/rigup/uv", [("/opt/rigup/vllm/venv", True)], starts=True
    )
    free = FreeSpace().process(CAPTURE.lines)
    (tmp,) = free_space_problems(needs, free)  # / holds 39 GiB: 2 (start) + 5 (venv) fits
    assert tmp.startswith(
        "/var/lib/rigup/vllm/tmp (file system /var/lib/rigup/vllm/tmp): 0.0010 GiB free of "
        "0.06 GiB, 2 GiB needed: a start of vllm.service"
    )
    tight = {p: {**fs, "free_gib": 6.5} for p, fs in free.items() if fs["mount"] == "/"}
    (root,) = free_space_problems(needs, tight)
    assert "(file system /): 6.50 GiB free" in root and "7 GiB needed" in root
    assert "vLLM's venv: 5 GiB (v)" in root and "(s)" in root


def test_a_path_without_a_figure_is_not_checked():
    assert free_space_problems([SpaceNeed("/x", 9.0, "w", "s")], {}) == []


@pytest.mark.parametrize("service", (*SERVICES, ROUTER), ids=lambda s: s.name)
def test_every_service_declares_its_needs_with_their_source(service):
    disk = service.disk
    assert disk.start_gib >= START_FLOOR_GIB and disk.venv_gib > 0
    assert disk.start_source.startswith("the doctor's disk/full threshold")
    assert len(disk.venv_source) > 20
