"""The wheelhouse a GPU machine without network needs to run vLLM 0.22.1: the wheels of
files/vllm/requirements.lock it lacks, hash-checked, packed into pieces small enough to carry.

Runs on the controller (network to PyPI). What the target lacks comes from one of:

- its ``python3 -m pip list --format=freeze`` output (``--freeze FILE``): every lock entry for
  the target's Python and platform that it does not have at the locked version;
- a known image (``--image nvidia-h200``): the wheels measured missing there
  (images/nvidia-h200.txt, the lent H200 machine, 2026-12-01).

Some lock packages are left out on purpose (:data:`LEFT_OUT`, each with its reason): none is
imported to serve Qwen3.6-27B AutoRound INT4 on CUDA, and together they are over 700 MB.

The wheels are downloaded by pip (``pip download --no-deps --only-binary=:all:
--require-hashes`` for the target's Python and platform) into a reusable directory: a wheel
already there, or in a ``--have`` directory, whose sha256 the lock lists is not fetched again.
Every wheel's sha256 is checked against the lock once more before packing. The pack is one
uncompressed tar (wheels are already zip files) cut into pieces of at most ``--piece-mib`` MiB,
with ``manifest.json``: each piece's and the tar's sha256, and each wheel's.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
LOCK = REPO / "files" / "vllm" / "requirements.lock"
IMAGES = HERE.parent / "images"
PACK = "rigup-wheels.tar"
MANIFEST = "manifest.json"
#: the carried pieces' size limit: the device tool carries at most 64 MiB per call, the working
#: tree (about 5 MiB) included; 55 MiB pieces went through on the H200 (2026-12-01)
DEFAULT_PIECE_MIB = 55

#: lock packages not carried, with the reason (measured on the H200, 2026-12-01:
#: tests/fixtures/vllm-cuda/wheels-left-out.txt lists their sizes)
LEFT_OUT = {
    "flashinfer-cubin": "FlashInfer's prebuilt kernels (361 MB); FlashInfer compiles what it "
    "needs with the machine's nvcc (JIT) instead",
    "tokenspeed-triton": "TokenSpeed's Triton fork (95 MB), imported only by its MLA kernels "
    "(DeepSeek-style attention), not by Qwen3.6",
    "tokenspeed-mla": "MLA attention kernels (DeepSeek-style), not used by Qwen3.6",
    "tilelang": "TileLang kernels (45 MB), imported only by kernels this model does not use",
    "z3-solver": "the SMT solver only TileLang imports (29 MB)",
    "nvidia-nvvm": "pip's CUDA compiler parts (75 MB): the machine's own CUDA toolkit compiles",
    "nvidia-cuda-nvcc": "pip's nvcc (47 MB): the machine's own nvcc serves FlashInfer's JIT",
    "nvidia-cuda-crt": "pip's CUDA compiler runtime headers: the machine's toolkit has them",
    "nvidia-cuda-cccl": "pip's CUDA C++ core libraries headers: the machine's toolkit has them",
    "nvidia-cutlass-dsl": "CUTLASS's Python DSL, imported only by the CuTe-DSL kernels "
    "(--gdn-prefill-backend cutedsl, Blackwell paths), not on the 3090's paths",
    "nvidia-cutlass-dsl-libs-base": "CUTLASS DSL libraries (75 MB), see nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-cu13": "CUTLASS DSL libraries (79 MB), see nvidia-cutlass-dsl",
    "quack-kernels": "QuACK's CuTe-DSL kernels, imported only with nvidia-cutlass-dsl",
}


class WheelhouseError(Exception):
    """A wheelhouse cannot be built or unpacked as asked (the message names what and why)."""


def normal(name: str) -> str:
    """A distribution name as PEP 503 normalises it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One lock entry: ``name==version ; marker`` with its sha256 hashes."""

    name: str  # normalised
    version: str
    marker: str  # "" when unconditional
    hashes: frozenset[str]


def parse_lock(text: str) -> list[Pin]:
    """The entries of a ``uv pip compile --generate-hashes`` lock (continuation lines joined)."""
    pins = []
    for entry in re.sub(r"\\\n", " ", text).splitlines():
        m = re.match(
            r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*(?:;\s*(.*?))?\s*(?=--hash|#|$)", entry
        )
        if not m:
            continue
        hashes = frozenset(re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
        pins.append(Pin(normal(m.group(1)), m.group(2), (m.group(3) or "").strip(), hashes))
    return pins


@dataclass(frozen=True)
class Target:
    """The machine the wheels are for: CPython ``python`` (``"3.12"``) on ``platform``, a
    ``manylinux_2_<glibc minor>_<arch>`` tag (glibc 2.35: Ubuntu 22.04; the H200 image has a
    newer one)."""

    python: str = "3.12"
    platform: str = "manylinux_2_35_x86_64"

    def platforms(self) -> list[str]:
        """Every platform tag a wheel for this target may carry, newest first: pip's
        ``--platform`` takes only the tags it is given (pip 23 does not expand a
        ``manylinux_2_35`` to older glibc), so a ``manylinux_2_28`` wheel needs its own tag.
        PEP 600's tags down to glibc 2.5, with PEP 599/571/513's legacy aliases. Raises
        WheelhouseError when ``platform`` is not a ``manylinux_2_N_<arch>`` tag."""
        m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", self.platform)
        if not m:
            raise WheelhouseError(f"platform {self.platform!r}: not manylinux_2_<N>_<arch>")
        minor, arch = int(m.group(1)), m.group(2)
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags = []
        for y in range(minor, 4, -1):
            tags.append(f"manylinux_2_{y}_{arch}")
            if y in legacy:
                tags.append(f"{legacy[y]}_{arch}")
        return tags

    def environment(self) -> dict[str, str]:
        """PEP 508 marker variables of the target."""
        arch = re.sub(r"^manylinux_2_\d+_", "", self.platform)
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "os_name": "posix",
            "platform_machine": arch,
        }


def applies(pin: Pin, target: Target) -> bool:
    """Whether the lock entry installs on ``target`` (its marker, evaluated by ``packaging``)."""
    if not pin.marker:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.markers import Marker
    return Marker(pin.marker).evaluate(target.environment())


def parse_freeze(text: str) -> dict[str, str]:
    """normalised name -> version from ``pip list --format=freeze`` (or ``pip freeze``) output;
    lines that are not ``name==version`` (editables, comments) are skipped."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if m:
            out[normal(m.group(1))] = m.group(2)
    return out


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(normalised name, version) of a wheel file name (PEP 427). Raises WheelhouseError."""
    parts = Path(filename).name.split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        raise WheelhouseError(f"{filename}: not a wheel file name")
    return normal(parts[0]), parts[1]


def image_missing(image: str) -> set[str]:
    """Names of the lock's wheels the known image ``image`` lacks (images/<image>.txt).
    Raises WheelhouseError for an unknown image, naming the known ones."""
    path = IMAGES / f"{image}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in IMAGES.glob("*.txt")))
        raise WheelhouseError(f"unknown image {image!r}; known: {known}")
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            names.add(wheel_name_version(line.split()[-1])[0])
    return names


@dataclass(frozen=True)
class Plan:
    """What to carry: ``wanted`` (lock entries), ``left_out`` (name -> reason), ``present``
    (names the target has at the locked version)."""

    wanted: tuple[Pin, ...]
    left_out: Mapping[str, str]
    present: tuple[str, ...]


def plan(
    pins: Iterable[Pin],
    target: Target,
    *,
    installed: Mapping[str, str] | None = None,
    missing: set[str] | None = None,
    left_out: Mapping[str, str] = LEFT_OUT,
) -> Plan:
    """The lock entries for ``target`` that it lacks: by its ``installed`` distributions
    (name -> version; a different version counts as lacking) or by a known image's ``missing``
    set (measured without ``left_out``, which is reported as left out); minus ``left_out``. Exactly one of ``installed`` and ``missing``. Raises WheelhouseError
    when the lock pins a name twice for the target, or when neither or both are given."""
    if (installed is None) == (missing is None):
        raise WheelhouseError("give the target's installed distributions or its missing set")
    chosen: dict[str, Pin] = {}
    for pin in pins:
        if not applies(pin, target):
            continue
        if pin.name in chosen:
            raise WheelhouseError(f"the lock pins {pin.name} twice for Python {target.python}")
        chosen[pin.name] = pin
    wanted, skipped, present = [], {}, []
    for name, pin in sorted(chosen.items()):
        if installed is not None:
            lacks = installed.get(name) != pin.version
        else:  # a known image: its measured missing list; the declared left-out ones too
            lacks = name in missing or name in left_out
        if not lacks:
            present.append(name)
        elif name in left_out:
            skipped[name] = left_out[name]
        else:
            wanted.append(pin)
    if missing is not None:
        unknown = sorted(missing - set(chosen))
        if unknown:
            raise WheelhouseError(f"the image's missing list names what the lock lacks: {unknown}")
    return Plan(tuple(wanted), skipped, tuple(present))


def sha256_file(path: Path) -> str:
    """The file's sha256, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def find_checked(pin: Pin, dirs: Iterable[Path]) -> Path | None:
    """A wheel of ``pin`` in ``dirs`` whose sha256 the lock lists, or None."""
    for d in dirs:
        for path in sorted(Path(d).glob("*.whl")):
            try:
                name, version = wheel_name_version(path.name)
            except WheelhouseError:
                continue
            if name == pin.name and version == pin.version and sha256_file(path) in pin.hashes:
                return path
    return None


def pip_download_argv(requirements: Path, dest: Path, target: Target) -> list[str]:
    """``pip download`` of a hashed requirements file, wheels only, for ``target``."""
    return [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--require-hashes",
        "--python-version", target.python, "--implementation", "cp",
        *(a for tag in target.platforms() for a in ("--platform", tag)),
        "--dest", str(dest), "--disable-pip-version-check", "--quiet",
        "-r", str(requirements),
    ]  # fmt: skip


def fetch(p: Plan, dest: Path, target: Target, have: Iterable[Path] = ()) -> dict[str, Path]:
    """Every wanted wheel in ``dest`` (created), checked against the lock: reused from ``dest``
    or ``have`` when there with a locked hash, else downloaded by pip. Returns name -> path.
    Raises WheelhouseError when pip fails or a wheel does not match the lock, and before any
    change when a ``have`` directory does not exist (a mistyped path would else mean
    downloading every wheel without a word)."""
    have = list(have)
    absent = [str(d) for d in have if not Path(d).is_dir()]
    if absent:
        raise WheelhouseError(f"--have: no such directory: {', '.join(absent)}")
    dest.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    todo = []
    for pin in p.wanted:
        path = find_checked(pin, [dest, *have])
        if path is None:
            todo.append(pin)
            continue
        if path.parent != dest:
            shutil.copy2(path, dest / path.name)
        found[pin.name] = dest / path.name
    if todo:
        req = dest / ".requirements-to-fetch.txt"
        req.write_text(
            "".join(
                f"{pin.name}=={pin.version} "
                + " ".join(f"--hash=sha256:{h}" for h in sorted(pin.hashes))
                + "\n"
                for pin in todo
            ),
            encoding="utf-8",
        )
        done = subprocess.run(pip_download_argv(req, dest, target), check=False)
        req.unlink()
        if done.returncode != 0:
            raise WheelhouseError(f"pip download failed (exit {done.returncode})")
        for pin in todo:
            path = find_checked(pin, [dest])
            if path is None:
                raise WheelhouseError(f"{pin.name}=={pin.version}: no wheel with a locked hash")
            found[pin.name] = path
    return found


def pack(wheels: Mapping[str, Path], out: Path, piece_mib: int = DEFAULT_PIECE_MIB) -> dict:
    """Tar ``wheels`` (uncompressed) and cut it into ``<out>/rigup-wheels.tar.NNN`` pieces of at
    most ``piece_mib`` MiB; write and return the manifest: ``{"tar": {"sha256", "bytes"},
    "pieces": [{"file", "sha256", "bytes"}], "wheels": {filename: sha256}}``."""
    if piece_mib < 1:
        raise WheelhouseError(f"--piece-mib must be at least 1, not {piece_mib}")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{PACK}*"):
        old.unlink()
    tar_path = out / PACK
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(wheels.values(), key=lambda p: p.name):
            tar.add(path, arcname=path.name)
    size = piece_mib << 20
    pieces = []
    with open(tar_path, "rb") as f:
        for k in range(10**6):
            data = f.read(size)
            if not data:
                break
            piece = out / f"{PACK}.{k:03d}"
            piece.write_bytes(data)
            pieces.append(
                {"file": piece.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            )
    manifest = {
        "tar": {"sha256": sha256_file(tar_path), "bytes": tar_path.stat().st_size},
        "pieces": pieces,
        "wheels": {p.name: sha256_file(p) for p in sorted(wheels.values(), key=lambda p: p.name)},
    }
    tar_path.unlink()
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
