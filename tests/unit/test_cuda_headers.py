"""CUDA 13.0's crt/math_functions.h against glibc >= 2.42 (roles/nvidia/cuda_headers.py), on the
real header's lines (tests/fixtures/cuda) and real glibc answers (tests/fixtures/glibc)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from roles.nvidia.cuda_headers import (
    MARK,
    HeaderError,
    needs_noexcept,
    noexcept_edits,
    parse_glibc_version,
    patched_header,
    sed_command,
)
from roles.nvidia.facts import CudaMathHeader, Glibc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HEADER = FIXTURES / "cuda" / "math_functions-13.0.88-rsqrt.h"
DOUBLE = (
    "extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 rsqrt(double x);"
)
FLOAT = (
    "extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  rsqrtf(float x);"
)


@pytest.mark.parametrize(
    "capture,version",
    [
        ("ubuntu-26.04-getconf.txt", (2, 43)),
        ("ubuntu-26.04-ldd.txt", (2, 43)),
        ("debian-13-getconf.txt", (2, 41)),
        ("debian-13-ldd.txt", (2, 41)),
        ("debian-12-getconf.txt", (2, 36)),
        ("debian-12-ldd.txt", (2, 36)),
    ],
)
def test_glibc_fact_reads_getconf_and_ldd(capture, version):
    lines = (FIXTURES / "glibc" / capture).read_text().splitlines()
    assert Glibc().process(lines) == version


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["musl libc (x86_64)", "Version 1.2.5"],
        ["ldd: unrecognized option '--version'"],
    ],
)
def test_glibc_fact_is_none_for_other_libcs(lines):
    assert parse_glibc_version(lines) is None


@pytest.mark.parametrize(
    "glibc,needed",
    [((2, 41), False), ((2, 42), True), ((2, 43), True), ((3, 0), True), (None, False)],
)
def test_noexcept_needed_from_glibc_2_42(glibc, needed):
    assert needs_noexcept(glibc) is needed
    assert needs_noexcept(list(glibc) if glibc else glibc) is needed  # a fact read back from JSON


def test_the_real_header_gets_noexcept_on_its_two_declarations_only():
    text = HEADER.read_text()
    patched = patched_header(text)
    before, after = text.split("\n"), patched.split("\n")
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [
        (DOUBLE, DOUBLE.removesuffix(";") + f" noexcept(true); {MARK}"),
        (FLOAT, FLOAT.removesuffix(";") + f" noexcept(true); {MARK}"),
    ]
    # the inline overload and the __func__ definitions of rsqrt stay NVIDIA's
    assert "__MATH_FUNCTIONS_DECL__ float rsqrt(const float a);" in after
    assert "__func__(double rsqrt(double a));" in after
    assert patched_header(patched) == patched


def test_declarations_with_a_specifier_are_left_as_they_are():
    cuda_13_2 = {  # CUDA 13.2 declares them with _NV_RSQRT_SPECIFIER (llvm/llvm-project#185701)
        1: DOUBLE.replace("(double x);", "(double x) _NV_RSQRT_SPECIFIER;"),
        2: FLOAT.replace("(float x);", "(float x) _NV_RSQRT_SPECIFIER;"),
    }
    assert noexcept_edits(cuda_13_2) == {}
    assert noexcept_edits({7: DOUBLE + " // a comment", 9: FLOAT}) == {
        7: DOUBLE.removesuffix(";") + f" noexcept(true); // a comment {MARK}",
        9: FLOAT.removesuffix(";") + f" noexcept(true); {MARK}",
    }


@pytest.mark.parametrize(
    "declarations,missing",
    [({}, "rsqrt, rsqrtf"), ({629: DOUBLE}, "rsqrtf"), ({653: FLOAT}, "rsqrt")],
)
def test_a_header_without_the_declarations_is_refused(declarations, missing):
    with pytest.raises(HeaderError, match=f"no extern declaration of {missing} in"):
        noexcept_edits(declarations)


def test_sed_refuses_lines_it_would_not_write_as_given():
    with pytest.raises(ValueError, match="line 3 of /x cannot be written"):
        sed_command("/x", {3: "extern double rsqrt(double x) noexcept(true); /* a\\b */"})


@pytest.mark.skipif(not (shutil.which("bash") and shutil.which("sed")), reason="needs bash, sed")
def test_fact_and_sed_edit_a_copy_of_the_real_header_as_patched_header_does(tmp_path):
    """The host's side for real: the CudaMathHeader fact's command, then the operation's sed,
    on a copy of the real header lines; a second pass finds nothing to do."""
    header = tmp_path / "math_functions.h"
    shutil.copy(HEADER, header)

    def fact() -> dict:
        out = subprocess.run(
            ["bash", "-c", CudaMathHeader().command(str(header))],
            capture_output=True,
            text=True,
            check=True,
        )
        return CudaMathHeader().process(out.stdout.splitlines())

    found = fact()
    assert found["exists"]
    assert set(found["declarations"].values()) == {DOUBLE, FLOAT}
    edits = noexcept_edits(found["declarations"])
    subprocess.run(["bash", "-c", sed_command(str(header), edits)], check=True)
    assert header.read_text() == patched_header(HEADER.read_text())
    assert noexcept_edits(fact()["declarations"]) == {}

    assert CudaMathHeader().process(["@absent"]) == {"exists": False, "declarations": {}}
