"""How much disk the test suite's lab machines need, and so how many pytest-xdist workers
bin/rigup-test can give them.

Each worker converges a session lab machine of its own (tests/lab/labtools.py); later the lab
pair and the cgroup pair come and go. What they need is the lab's cache (``RIGUP_LAB_CACHE_DIR``:
the Ubuntu template, uv's unpacked wheels, the CUDA vLLM venv of the parser checks) plus each
machine's own files (its root file system, apt's packages, and on a cold cache the wheels it
downloaded itself: two machines converging at once on a cold cache each fetch theirs). A warm
cache lowers the need by what it already holds. The figures are measured (:data:`COLD_PEAK_GIB`);
a machine whose disk holds less than the need for two workers runs one (slower, about 60 minutes
cold), and one that holds less than the need for one is refused before any test, naming the need.

Standard library only.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lab.config import DEFAULT_CACHE_DIR, DEFAULT_STATE_ROOT, LabError
from lab.host import nearest_existing

GIB = 2**30

#: The suite's peak disk use with an empty cache, in GiB, by number of workers. Two: measured,
#: the cache and every lab directory of the run sampled every 30 s (``du``, each file counted
#: once) on the cold fresh-clone run of 2026-12-02 09:02-09:54 UTC: 31,157 MiB at the peak (both
#: session machines converged), rounded up. One: derived from the same run's parts, not
#: measured alone: the cache with the CUDA venv's wheels (~19 GiB) and the pair (~7 GiB).
#: ComfyUI in the lab (since 2026-12-03) adds what its venv shares with no other venv: 1.79 GB
#: (1.7 GiB) of wheels, CPython 3.14's CUDA torch build above all (benchmarks/comfyui-venv.sh in
#: the lab, docs/comfyui.md); each machine converging on a cold cache fetches its own copy.
COMFYUI_COLD_GIB = 1.7
COLD_PEAK_GIB = {2: 31.0 + 2 * COMFYUI_COLD_GIB, 1: 26.0 + COMFYUI_COLD_GIB}
#: What the machines need beyond a fully warm cache, in GiB, by number of workers: a converged
#: session machine's own files 4.2 GiB (rootfs, apt's packages; its venvs are links into the
#: cache), a pair machine's about 3.5 GiB, measured on 2026-12-02.
WARM_FLOOR_GIB = {2: 12.0, 1: 8.0}
#: Kept free beyond the need: logs, pytest's temp files, the journal in each machine.
MARGIN_GIB = 4.0


@dataclass(frozen=True)
class DiskPlan:
    """The workers the suite can run: ``workers`` (1 or 2), ``free_gib`` on the lab's file
    system, ``cached_gib`` already in the lab cache, ``need_gib`` for the chosen count (for 1
    when even that does not fit) and ``why`` (one line for the user)."""

    workers: int
    free_gib: float
    cached_gib: float
    need_gib: float
    why: str


def need_gib(workers: int, cached_gib: float) -> float:
    """GiB the suite's lab needs free for ``workers`` (1 or 2) with ``cached_gib`` already in
    the lab cache: the cold peak less what is cached, never less than the warm floor; plus
    :data:`MARGIN_GIB`.

    Raises:
        KeyError: ``workers`` other than 1 or 2.
    """
    return max(WARM_FLOOR_GIB[workers], COLD_PEAK_GIB[workers] - cached_gib) + MARGIN_GIB


def tree_gib(path: Path) -> float:
    """GiB the files under ``path`` take on disk (blocks, each hard-linked file once); 0 if
    absent."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += st.st_blocks * 512
    return total / GIB


def plan(free_gib: float, cached_gib: float) -> DiskPlan:
    """Two workers if their need fits in ``free_gib``, else one (with the reason).

    Raises:
        LabError: not even one worker's need fits; the message names the need and what to do.
    """
    for workers in (2, 1):
        need = need_gib(workers, cached_gib)
        if free_gib >= need:
            why = (
                f"{free_gib:.0f} GiB free, {cached_gib:.0f} GiB cached: {workers} workers "
                f"(they need about {need:.0f} GiB)"
            )
            if workers == 1:
                why += (
                    f"; two need about {need_gib(2, cached_gib):.0f} GiB, so the lab machines "
                    "run one after the other (slower)"
                )
            return DiskPlan(workers, free_gib, cached_gib, need, why)
    raise LabError(
        f"the lab scenario needs about {need:.0f} GiB free on the lab's disk and {free_gib:.1f} "
        f"GiB are free ({cached_gib:.0f} GiB already cached in the lab cache). Free some disk there "
        f"(the lab's machines live in {DEFAULT_STATE_ROOT}; RIGUP_LAB_CACHE_DIR can move the "
        "cache), or run the tests without the lab: bin/rigup-test -m 'not lab'."
    )


def suite_plan(env: dict[str, str] | None = None) -> DiskPlan:
    """:func:`plan` for this machine: the free space of the file system holding the lab's
    machines (``/var/lib/rigup-lab``) or its cache (``RIGUP_LAB_CACHE_DIR``), the smaller of
    the two where they differ, and what that cache holds.

    Raises:
        LabError: as :func:`plan`.
    """
    env = dict(os.environ if env is None else env)
    cache = Path(env.get("RIGUP_LAB_CACHE_DIR", "") or DEFAULT_CACHE_DIR)
    where = (DEFAULT_STATE_ROOT, cache)
    free = min(shutil.disk_usage(nearest_existing(p)).free for p in where) / GIB
    return plan(free, tree_gib(cache))
