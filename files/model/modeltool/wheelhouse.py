"""What the venvs need, for a backup: a wheelhouse holding, for every venv rigup built on the
host, each wheel its lock installed, checked against the lock's sha256; and the CPython builds uv
installed, as archives uv installs again (``UV_PYTHON_DOWNLOADS_JSON_URL``).

uv keeps no ``.whl`` files (its cache holds unpacked wheels), so the wheels come from the package
index (``uv_index_url`` or PyPI) the first time a backup is made; later backups fetch only what is
new. A rebuild with no network then installs every venv from the wheelhouse
(``uv_find_links`` = ``<backup>/wheels``, ``uv_offline``) and CPython from the archives
(``voxcpm_python_downloads_json`` = ``<backup>/python/downloads.json``).

The venvs are found by rigup's layout: ``<prefix>/<component>/requirements.lock`` beside
``<prefix>/<component>/venv`` (ComponentPaths), and uv's own ``<prefix>/uv.lock`` beside
``<prefix>/uv``.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import re
import shutil
import ssl
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from modeltool.hashing import sha256_file
from modeltool.layout import FetchError
from modeltool.partial import current
from modeltool.progress import Progress

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
RECORDED = ".rigup-wheels.json"  # filename -> {size, sha256} of the wheels already checked


def normal(name: str) -> str:
    """A distribution name as PEP 503 normalises it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, dict[str, set[str]]]:
    """normalised name -> {version: sha256 hashes} of a ``uv pip compile --generate-hashes``
    lock (a universal lock may pin a name twice, for different Pythons)."""
    out: dict[str, dict[str, set[str]]] = {}
    for entry in re.sub(r"\\\n", " ", text).splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", entry)
        if m:
            hashes = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
            out.setdefault(normal(m.group(1)), {}).setdefault(m.group(2), set()).update(hashes)
    return out


def installed(venv: Path) -> dict[str, str]:
    """normalised name -> version of every distribution installed in ``venv``."""
    out = {}
    for meta in venv.glob("lib/python3*/site-packages/*.dist-info/METADATA"):
        name = version = None
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Name: "):
                name = line[6:].strip()
            elif line.startswith("Version: "):
                version = line[9:].strip()
            elif not line:
                break
        if name and version:
            out[normal(name)] = version
    return out


def python_version(venv: Path) -> tuple[int, int]:
    """(major, minor) of the interpreter a venv was made with (its pyvenv.cfg)."""
    for line in (venv / "pyvenv.cfg").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("version_info", "version"):
            major, minor = value.strip().split(".")[:2]
            return int(major), int(minor)
    raise FetchError(f"{venv}/pyvenv.cfg names no Python version")


def supported_tags(version: tuple[int, int]) -> dict[str, int]:
    """Wheel tags a CPython ``version`` on this machine installs, best first: tag -> rank."""
    from packaging import tags

    platforms = list(tags.platform_tags())
    abi = f"cp{version[0]}{version[1]}"
    ordered = [
        *tags.cpython_tags(version, abis=[abi, "abi3", "none"], platforms=platforms),
        *tags.compatible_tags(version, interpreter=abi, platforms=platforms),
    ]
    return {str(tag): rank for rank, tag in reversed(list(enumerate(ordered)))}


class _Links(html.parser.HTMLParser):
    """The anchors of a PEP 503 simple page: (href, text)."""

    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((self._href, data.strip()))
            self._href = None


def _get(url: str) -> tuple[bytes, str]:
    request = urllib.request.Request(url, headers={"Accept": f"{SIMPLE_JSON}, text/html;q=0.1"})
    with urllib.request.urlopen(request, context=ssl.create_default_context(), timeout=60) as r:
        return r.read(), r.headers.get("Content-Type", "")


def index_files(index: str, name: str) -> list[dict]:
    """The files a simple index (PEP 691 JSON, or PEP 503 HTML) lists for ``name``:
    ``[{"filename", "url", "sha256"}]``."""
    page = f"{index.rstrip('/')}/{normal(name)}/"
    body, kind = _get(page)
    out = []
    if SIMPLE_JSON in kind:
        for f in json.loads(body)["files"]:
            sha = (f.get("hashes") or {}).get("sha256")
            out.append({"filename": f["filename"], "url": urllib.parse.urljoin(page, f["url"]),
                        "sha256": sha})  # fmt: skip
        return out
    parser = _Links()
    parser.feed(body.decode("utf-8", errors="replace"))
    for href, text in parser.links:
        url, _, fragment = href.partition("#")
        sha = fragment[7:] if fragment.startswith("sha256=") else None
        out.append({"filename": text, "url": urllib.parse.urljoin(page, url), "sha256": sha})
    return out


def best_wheel(files: list[dict], hashes: set[str], tags: dict[str, int]) -> dict | None:
    """Of the files whose sha256 the lock accepts, the wheel whose tags rank best here."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    best, best_rank = None, None
    for f in files:
        if f["sha256"] not in hashes or not f["filename"].endswith(".whl"):
            continue
        try:
            wheel_tags = parse_wheel_filename(f["filename"])[3]
        except InvalidWheelFilename:
            continue
        ranks = [tags[str(t)] for t in wheel_tags if str(t) in tags]
        if ranks and (best_rank is None or min(ranks) < best_rank):
            best, best_rank = f, min(ranks)
    return best


def _download(url: str, target: Path, sha256: str, progress: Progress) -> int:
    tmp = target.with_name(f".{target.name}.incomplete")
    h = hashlib.sha256()
    with urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=120) as r:
        with open(tmp, "wb") as out:
            while chunk := r.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
                progress.add(len(chunk), target.name)
    if h.hexdigest() != sha256:
        tmp.unlink()
        raise FetchError(f"{url}: sha256 {h.hexdigest()}, the lock says {sha256}")
    os.chmod(tmp, 0o644)
    tmp.replace(target)
    return target.stat().st_size


def venvs(prefix: Path) -> list[tuple[Path, Path]]:
    """(lock, venv) of every venv rigup built under ``prefix``."""
    found = []
    for lock in sorted(prefix.glob("*/requirements.lock")):
        if (lock.parent / "venv" / "pyvenv.cfg").is_file():
            found.append((lock, lock.parent / "venv"))
    if (prefix / "uv.lock").is_file() and (prefix / "uv" / "pyvenv.cfg").is_file():
        found.append((prefix / "uv.lock", prefix / "uv"))
    return found


def best_sdist(files: list[dict], hashes: set[str]) -> dict | None:
    """The source distribution whose sha256 the lock accepts (a package with no wheel)."""
    for f in files:
        if f["sha256"] in hashes and f["filename"].endswith((".tar.gz", ".zip")):
            return f
    return None


def build_requires(sdist: Path) -> list[str]:
    """What building an sdist needs (its pyproject.toml's build-system.requires; setuptools
    when it has none, as uv and pip assume)."""
    import tomllib

    text = None
    if sdist.name.endswith(".zip"):
        import zipfile

        with zipfile.ZipFile(sdist) as z:
            names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith("/pyproject.toml")]
            text = z.read(names[0]).decode() if names else None
    else:
        with tarfile.open(sdist) as t:
            member = next(
                (m for m in t.getmembers()
                 if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")),
                None,
            )  # fmt: skip
            extracted = t.extractfile(member) if member else None
            text = extracted.read().decode() if extracted else None
    if text:
        requires = tomllib.loads(text).get("build-system", {}).get("requires")
        if requires is not None:
            return list(requires)
    return ["setuptools>=40.8.0"]


class _Filler:
    """Fills one wheelhouse (see :func:`fill`)."""

    def __init__(self, wheelhouse: Path, indexes: list[str], spare: int):
        self.dir, self.indexes, self.spare = wheelhouse, indexes, spare
        self.recorded_file = wheelhouse / RECORDED
        try:
            self.recorded = json.loads(self.recorded_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.recorded = {}
        self.progress = Progress(f"wheels into {wheelhouse}", None)
        self.fetched, self.problems = 0, []

    def held(self, hashes: set[str], tags: dict[str, int]) -> bool:
        """Whether the wheelhouse has a file of these hashes that installs here (a wheel of
        another Python's tags, for another venv, does not count)."""
        listed = [{"filename": f, "sha256": r["sha256"]} for f, r in self.recorded.items()
                  if (self.dir / f).is_file() and (self.dir / f).stat().st_size == r["size"]]  # fmt: skip
        return bool(best_wheel(listed, hashes, tags) or best_sdist(listed, hashes))

    def listing(self, name: str) -> list[dict]:
        files = []
        for index in self.indexes:
            try:
                files += index_files(index, name)
            except OSError as e:
                self.problems.append(f"{name}: {index}: {e}")
        return files

    def take(self, f: dict, **note) -> Path:
        if shutil.disk_usage(self.dir).free < self.spare:
            raise FetchError(f"not enough free space for the wheelhouse on {self.dir}")
        target = self.dir / f["filename"]
        size = _download(f["url"], target, f["sha256"], self.progress)
        self.recorded[f["filename"]] = {"size": size, "sha256": f["sha256"], **note}
        self.recorded_file.write_text(json.dumps(self.recorded, indent=1, sort_keys=True) + "\n")
        self.fetched += size
        return target

    def pinned(self, name: str, version: str, hashes: set[str], tags: dict[str, int]) -> None:
        """The wheel (else the sdist and what builds it) of one locked distribution."""
        if self.held(hashes, tags):
            return
        if not self.indexes:
            self.problems.append(f"{name}=={version}: not in {self.dir}, and no index (offline)")
            return
        files = self.listing(name)
        wheel = best_wheel(files, hashes, tags)
        if wheel:
            self.take(wheel)
            return
        sdist = best_sdist(files, hashes)
        if sdist is None:
            self.problems.append(
                f"{name}=={version}: the index has no file with a locked sha256 for this machine"
            )
            return
        self.build_tools(build_requires(self.take(sdist)), tags)

    def build_tools(self, requires: list[str], tags: dict[str, int]) -> None:
        """The newest wheel of each build requirement (not pinned by the lock: uv does not pin
        build tools either; a backend with dependencies of its own is named as a problem)."""
        from packaging.requirements import Requirement
        from packaging.utils import parse_wheel_filename

        for text in requires:
            req = Requirement(text)
            candidates = []
            for f in self.listing(req.name):
                if not f["filename"].endswith(".whl") or not f["sha256"]:
                    continue
                _, version, _, wheel_tags = parse_wheel_filename(f["filename"])
                if version in req.specifier and any(str(t) in tags for t in wheel_tags):
                    candidates.append((version, f))
            if not candidates:
                self.problems.append(f"build requirement {text}: no wheel for this machine")
                continue
            _, newest = max(candidates, key=lambda c: c[0])
            if newest["filename"] not in self.recorded:
                self.take(newest, build_requirement=text)


def fill(wheelhouse: Path, prefix: Path, indexes: list[str], spare: int) -> dict:
    """Put into ``wheelhouse`` every wheel the venvs under ``prefix`` were built from, or, for a
    distribution that has none, its sdist and the wheels that build it (see the module
    docstring); returns what it holds and what it fetched."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    filler = _Filler(wheelhouse, indexes, spare)
    current["progress"] = filler.progress
    seen: set[tuple[str, str]] = set()
    found = venvs(prefix)
    for lock, venv in found:
        pins = parse_lock(lock.read_text(encoding="utf-8"))
        tags = supported_tags(python_version(venv))
        for name, version in sorted(installed(venv).items()):
            if name not in pins or (name, version, str(venv)) in seen:
                continue  # not the lock's (the pip of uv's own venv)
            seen.add((name, version, str(venv)))
            if version not in pins[name]:
                filler.problems.append(
                    f"{venv}: {name} {version} installed, the lock pins "
                    f"{' or '.join(sorted(pins[name]))} (run the converge first)"
                )
                continue
            filler.pinned(name, version, pins[name][version], tags)
    return {
        "dir": str(wheelhouse),
        "venvs": [str(v) for _, v in found],
        "files": len(filler.recorded),
        "bytes_transferred": filler.fetched,
        "bytes_total": sum(r["size"] for r in filler.recorded.values()),
        "problems": filler.problems,
    }


def python_builds(install_dir: Path, to: Path) -> dict:
    """Archive each CPython build uv installed under ``install_dir``
    (``cpython-<version>-<os>-<arch>-<libc>``) into ``to`` as uv installs one (a ``python/``
    tree in a .tar.gz) and list them in ``to/downloads.json`` (uv's download list format, with
    the archive's sha256 and its file:// URL)."""
    to.mkdir(parents=True, exist_ok=True)
    listing = {}
    archived = 0
    for build in sorted(install_dir.glob("cpython-*")):
        m = re.match(r"^cpython-(\d+)\.(\d+)\.(\d+)-(\w+)-(\w+)-(\w+)$", build.name)
        if not m or not (build / "bin").is_dir():
            continue
        major, minor, patch, os_name, arch, libc = m.groups()
        archive = to / f"{build.name}.tar.gz"
        stamp = to / f".{build.name}.source"
        source = _tree_signature(build)
        if not (archive.is_file() and stamp.is_file() and stamp.read_text() == source):
            with tempfile.NamedTemporaryFile(dir=to, prefix=f".{build.name}.", delete=False) as tmp:
                with tarfile.open(fileobj=tmp, mode="w:gz") as tar:
                    tar.add(str(build), arcname="python")
            os.chmod(tmp.name, 0o644)
            os.replace(tmp.name, archive)
            stamp.write_text(source)
            archived += archive.stat().st_size
        listing[build.name] = {
            "name": "cpython",
            "arch": {"family": arch, "variant": None},
            "os": os_name,
            "libc": libc,
            "major": int(major),
            "minor": int(minor),
            "patch": int(patch),
            "prerelease": "",
            "url": f"file://{archive}",
            "sha256": sha256_file(archive),
            "variant": None,
        }
    downloads = to / "downloads.json"
    if listing:
        downloads.write_text(json.dumps(listing, indent=2, sort_keys=True) + "\n")
    return {"dir": str(to), "builds": sorted(listing), "bytes_transferred": archived,
            "downloads_json": str(downloads) if listing else ""}  # fmt: skip


def _tree_signature(root: Path) -> str:
    """Paths and sizes of a tree: an archive of it is made again only when it changed."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(f"{p.relative_to(root)}\0{p.stat().st_size}\n".encode())
    return h.hexdigest()
