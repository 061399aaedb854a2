"""benchmarks/gpu-serve's wheelhouse: what a target lacks from files/vllm/requirements.lock, what
is left out and why, the pieces and their manifest, and the install from them (a real wheel,
installed by pip --no-index --target)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

GPU_SERVE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu-serve"
sys.path.insert(0, str(GPU_SERVE))

from gpuserve import install, wheelhouse  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cuda"
LOCK = wheelhouse.parse_lock(wheelhouse.LOCK.read_text(encoding="utf-8"))
H200 = wheelhouse.Target("3.12", "manylinux_2_35_x86_64")


def _carried() -> dict[str, str]:
    out = {}
    for line in (FIXTURES / "wheels-carried.txt").read_text().splitlines():
        name, version = wheelhouse.wheel_name_version(line.split()[-1])
        out[name] = version
    return out


def test_the_h200_image_plan_is_the_98_wheels_measured_there():
    """The measured answer (tests/fixtures/vllm-cuda/wheels-carried.txt): the same names at the
    lock's versions for Python 3.12; nothing of the declared left-out list among them."""
    p = wheelhouse.plan(LOCK, H200, missing=wheelhouse.image_missing("nvidia-h200"))
    carried = _carried()
    assert len(carried) == 98
    assert {pin.name: pin.version for pin in p.wanted} == carried
    assert not set(carried) & set(wheelhouse.LEFT_OUT)
    assert set(p.left_out) == set(wheelhouse.LEFT_OUT)  # each reported with its reason


def test_left_out_wheels_are_those_measured_unneeded_each_with_a_reason():
    left = {
        wheelhouse.wheel_name_version(line.split()[-1])[0]
        for line in (FIXTURES / "wheels-left-out.txt").read_text().splitlines()
        if line.strip()
    }
    assert left == set(wheelhouse.LEFT_OUT)
    assert all(len(reason) > 20 for reason in wheelhouse.LEFT_OUT.values())
    locked = {pin.name for pin in LOCK}
    assert left <= locked, left - locked


def test_a_freeze_list_plans_what_is_missing_or_at_another_version():
    applicable = {p.name: p.version for p in LOCK if wheelhouse.applies(p, H200)}
    freeze = "\n".join(
        f"{n}=={v}" for n, v in applicable.items() if n not in ("vllm", "sniffio", "tilelang")
    )
    freeze += "\nfastapi==0.1.0\n-e git+https://example.invalid/x#egg=x\n"
    p = wheelhouse.plan(LOCK, H200, installed=wheelhouse.parse_freeze(freeze))
    assert sorted(pin.name for pin in p.wanted) == ["fastapi", "sniffio", "vllm"]
    assert set(p.left_out) == {"tilelang"}
    assert "torch" in p.present


def test_markers_pick_the_targets_pin():
    """The universal lock pins numpy twice (Python < 3.13 / >= 3.13) and colorama for Windows."""
    pins = {p.name: p for p in LOCK if wheelhouse.applies(p, H200)}
    assert pins["numpy"].version == "2.3.5"
    assert "colorama" not in pins
    py313 = {p.name: p for p in LOCK if wheelhouse.applies(p, wheelhouse.Target("3.13"))}
    assert py313["numpy"].version == "2.4.6"


def test_plan_refuses_unclear_input():
    with pytest.raises(wheelhouse.WheelhouseError, match="installed distributions"):
        wheelhouse.plan(LOCK, H200)
    with pytest.raises(wheelhouse.WheelhouseError, match="lock lacks"):
        wheelhouse.plan(LOCK, H200, missing={"not-in-the-lock"})
    with pytest.raises(wheelhouse.WheelhouseError, match="unknown image 'h100'.*nvidia-h200"):
        wheelhouse.image_missing("h100")


def test_platform_tags_reach_down_to_older_glibc():
    """pip's --platform takes only the tags given: a manylinux_2_28 wheel (cbor2 6.3.0) or a
    manylinux_2_31 one (llguidance 1.7.6) needs its tag listed for a glibc 2.35 target."""
    tags = H200.platforms()
    assert tags[0] == "manylinux_2_35_x86_64"
    for tag in ("manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64",
                "manylinux1_x86_64"):  # fmt: skip
        assert tag in tags
    argv = wheelhouse.pip_download_argv(Path("r.txt"), Path("d"), H200)
    assert argv.count("--platform") == len(tags)
    assert {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(argv)
    with pytest.raises(wheelhouse.WheelhouseError, match="not manylinux"):
        wheelhouse.Target(platform="linux_x86_64").platforms()


def make_wheel(dest: Path, name: str = "rigup_demo", version: str = "1.0") -> Path:
    """A real (tiny, pure-Python) wheel that pip installs."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"ANSWER = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rigup-test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(p, data)
    return path


def _pin_for(wheel: Path) -> wheelhouse.Pin:
    name, version = wheelhouse.wheel_name_version(wheel.name)
    return wheelhouse.Pin(name, version, "", frozenset({wheelhouse.sha256_file(wheel)}))


def test_fetch_reuses_wheels_with_a_locked_hash_and_fetches_nothing(tmp_path):
    have = tmp_path / "have"
    have.mkdir()
    wheel = make_wheel(have)
    p = wheelhouse.Plan((_pin_for(wheel),), {}, ())
    got = wheelhouse.fetch(p, tmp_path / "dl", H200, [have])
    assert got == {"rigup-demo": tmp_path / "dl" / wheel.name}
    # a wheel whose hash the lock does not list is not taken (pip would be asked, and fail)
    bad = wheelhouse.Plan((wheelhouse.Pin("rigup-demo", "1.0", "", frozenset({"0" * 64})),), {}, ())
    assert wheelhouse.find_checked(bad.wanted[0], [have]) is None


def test_pieces_install_and_a_damaged_piece_is_named(tmp_path):
    wheel = make_wheel(tmp_path)
    manifest = wheelhouse.pack({"rigup-demo": wheel}, tmp_path / "pieces", piece_mib=1)
    assert manifest["wheels"] == {wheel.name: wheelhouse.sha256_file(wheel)}
    assert json.loads((tmp_path / "pieces" / "manifest.json").read_text()) == manifest
    target = tmp_path / "site"
    got = install.install(tmp_path / "pieces", target)
    assert got["installed"] == 1
    out = subprocess.run(
        [sys.executable, "-c", "import rigup_demo; print(rigup_demo.ANSWER)"],
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "42"
    assert install.install(tmp_path / "pieces", target)["installed"] == 0  # already there
    piece = tmp_path / "pieces" / manifest["pieces"][0]["file"]
    piece.write_bytes(b"x" + piece.read_bytes()[1:])
    (tmp_path / "pieces" / "extra-missing").touch()
    with pytest.raises(wheelhouse.WheelhouseError, match="rigup-wheels.tar.000: sha256 differs"):
        install.check_pieces(tmp_path / "pieces")


def test_pieces_are_at_most_the_size_asked(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    wheel = make_wheel(big)
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr("rigup_demo/blob.bin", bytes(range(256)) * 10000)  # ~2.5 MB, stored
    manifest = wheelhouse.pack({"rigup-demo": wheel}, tmp_path / "pieces", piece_mib=1)
    sizes = [p["bytes"] for p in manifest["pieces"]]
    assert len(sizes) >= 3 and max(sizes) <= 1 << 20
    assert sum(sizes) == manifest["tar"]["bytes"]
    with pytest.raises(wheelhouse.WheelhouseError, match="at least 1"):
        wheelhouse.pack({}, tmp_path / "p0", piece_mib=0)
