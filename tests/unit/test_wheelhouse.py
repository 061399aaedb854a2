"""What a backup carries for the venvs (files/model/modeltool/wheelhouse.py): the pure parts on
constructed venvs, locks and index listings, and the CPython archive uv installs again. The
wheels themselves come from PyPI in the lab (tests/lab, the offline rebuild)."""

from __future__ import annotations

import importlib
import io
import json
import tarfile

import pytest

from roles.model.commands import modeltool  # noqa: F401  (registers the package)

wh = importlib.import_module("modeltool.wheelhouse")

LOCK = """\
cffi==2.1.1 ; platform_python_implementation != 'PyPy' \\
    --hash=sha256:{a} \\
    --hash=sha256:{b}
    # via cryptography
numpy==2.4.6 ; python_full_version < '3.12' \\
    --hash=sha256:{c}
numpy==2.5.5 ; python_full_version >= '3.12' \\
    --hash=sha256:{d}
Jieba==0.42.1 \\
    --hash=sha256:{e}
""".format(a="a" * 64, b="b" * 64, c="c" * 64, d="d" * 64, e="e" * 64)


def test_a_universal_lock_may_pin_a_name_twice():
    pins = wh.parse_lock(LOCK)
    assert pins["cffi"] == {"2.1.1": {"a" * 64, "b" * 64}}
    assert pins["numpy"] == {"2.4.6": {"c" * 64}, "2.5.5": {"d" * 64}}
    assert pins["jieba"] == {"0.42.1": {"e" * 64}}


def _venv(tmp_path, version: str, dists: dict[str, str]):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for name, ver in dists.items():
        info = site / f"{name}-{ver}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n\nx")
    (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion_info = {version}\n")
    return venv


def test_what_a_venv_holds_and_its_python(tmp_path):
    venv = _venv(
        tmp_path, "3.11.2", {"cffi": "2.1.1", "Numpy": "2.4.6", "charset_normalizer": "3.4"}
    )
    assert wh.installed(venv) == {"cffi": "2.1.1", "numpy": "2.4.6", "charset-normalizer": "3.4"}
    assert wh.python_version(venv) == (3, 11)


def test_the_wheel_chosen_is_locked_and_installs_here():
    tags = wh.supported_tags((3, 11))
    files = [
        {"filename": "cffi-2.1.1-cp313-cp313-manylinux_2_17_x86_64.whl", "sha256": "a" * 64},
        {"filename": "cffi-2.1.1-cp311-cp311-manylinux_2_17_x86_64.whl", "sha256": "b" * 64},
        {"filename": "cffi-2.1.1-cp311-cp311-manylinux_2_17_x86_64.whl", "sha256": "f" * 64},
        {"filename": "cffi-2.1.1.tar.gz", "sha256": "b" * 64},
    ]
    best = wh.best_wheel(files, {"a" * 64, "b" * 64}, tags)
    assert best["filename"] == "cffi-2.1.1-cp311-cp311-manylinux_2_17_x86_64.whl"
    assert best["sha256"] == "b" * 64, "only a hash the lock lists"
    assert wh.best_wheel(files[:1], {"a" * 64}, tags) is None, "a wheel for another Python"
    pure = [{"filename": "jieba-0.42.1.tar.gz", "sha256": "e" * 64}]
    assert wh.best_wheel(pure, {"e" * 64}, tags) is None
    assert wh.best_sdist(pure, {"e" * 64}) == pure[0]


def test_a_wheel_for_another_venvs_python_does_not_count_as_held(tmp_path):
    """cffi is in the model tool's venv (Python 3.13) and in VoxCPM2's (3.11): each needs its
    own wheel, though both hashes are the same lock entry's."""
    house = tmp_path / "wheels"
    house.mkdir()
    name = "cffi-2.1.1-cp313-cp313-manylinux_2_17_x86_64.whl"
    (house / name).write_bytes(b"x" * 10)
    (house / wh.RECORDED).write_text(json.dumps({name: {"size": 10, "sha256": "a" * 64}}))
    filler = wh._Filler(house, [], 0)
    hashes = {"a" * 64, "b" * 64}
    assert filler.held(hashes, wh.supported_tags((3, 13)))
    assert not filler.held(hashes, wh.supported_tags((3, 11)))


def _sdist(path, pyproject: str | None) -> None:
    with tarfile.open(path, "w:gz") as tar:
        files = {"pkg-1.0/setup.py": "from setuptools import setup\nsetup()\n"}
        if pyproject is not None:
            files["pkg-1.0/pyproject.toml"] = pyproject
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_what_building_an_sdist_needs(tmp_path):
    _sdist(tmp_path / "a.tar.gz", None)
    assert wh.build_requires(tmp_path / "a.tar.gz") == ["setuptools>=40.8.0"]
    _sdist(tmp_path / "b.tar.gz", '[build-system]\nrequires = ["hatchling>=1.26"]\n')
    assert wh.build_requires(tmp_path / "b.tar.gz") == ["hatchling>=1.26"]


def test_a_cpython_build_is_archived_as_uv_installs_one(tmp_path):
    build = tmp_path / "python" / "cpython-3.12.16-linux-x86_64-gnu"
    (build / "bin").mkdir(parents=True)
    (build / "bin" / "python3.12").write_text("#!/bin/true\n")
    (build / "lib" / "python3.12").mkdir(parents=True)
    out = wh.python_builds(tmp_path / "python", tmp_path / "backup" / "python")
    assert out["builds"] == ["cpython-3.12.16-linux-x86_64-gnu"]
    archive = tmp_path / "backup" / "python" / "cpython-3.12.16-linux-x86_64-gnu.tar.gz"
    with tarfile.open(archive) as tar:
        assert "python/bin/python3.12" in tar.getnames()
    (entry,) = json.loads((tmp_path / "backup" / "python" / "downloads.json").read_text()).values()
    assert entry["url"] == f"file://{archive}" and (entry["major"], entry["minor"]) == (3, 12)
    assert entry["sha256"] == wh.sha256_file(archive) and entry["libc"] == "gnu"
    again = wh.python_builds(tmp_path / "python", tmp_path / "backup" / "python")
    assert again["bytes_transferred"] == 0, "an unchanged build is not archived again"


@pytest.mark.parametrize("index", [[], ["https://pypi.org/simple"]])
def test_a_prefix_without_venvs_needs_nothing(tmp_path, index):
    out = wh.fill(tmp_path / "wheels", tmp_path / "prefix", index, 0)
    assert out["files"] == 0 and out["problems"] == [] and out["venvs"] == []


def test_offline_names_what_the_wheelhouse_lacks(tmp_path):
    prefix = tmp_path / "opt"
    venv = _venv(prefix / "model", "3.11.2", {"cffi": "2.1.1"})
    (prefix / "model" / "requirements.lock").write_text(LOCK)
    assert venv.parent == prefix / "model"
    out = wh.fill(tmp_path / "wheels", prefix, [], 0)
    assert out["problems"] == [f"cffi==2.1.1: not in {tmp_path / 'wheels'}, and no index (offline)"]
