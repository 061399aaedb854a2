"""lab/uvwarm.py: the locks it warms are the ones the lab's deploy installs, and a package with
no wheel is taken out of a real lock's text whole (its hash lines with it)."""

from __future__ import annotations

import re

from lab import uvwarm
from roles.vllm import LOCKS as VLLM_LOCKS


def test_the_locks_are_the_lab_deploys_own_and_exist():
    locks = uvwarm.lab_locks("resolute")
    paths = [lock for lock, _ in locks]
    assert all(p.is_file() for p in paths), paths
    assert VLLM_LOCKS["cpu"] in paths  # the lab serves vLLM's CPU build
    pythons = {p.parent.name: py for p, py in locks}
    assert pythons["voxcpm"] == "3.11" and pythons["vllm"] == "3.14"
    assert {py for _, py in uvwarm.lab_locks("trixie")} == {"3.13", "3.11"}


def test_a_package_without_wheel_leaves_the_lock_whole_with_its_hashes():
    text = (uvwarm.REPO / "files" / "voxcpm" / "requirements.lock").read_text()
    assert "antlr4-python3-runtime==" in text  # the real sdist-only package of this lock
    kept = uvwarm.without(text, {"antlr4-python3-runtime"})
    assert "antlr4-python3-runtime==" not in kept
    entries = lambda t: re.findall(r"^([A-Za-z0-9][^=\s]*)==", t, re.M)  # noqa: E731
    assert entries(kept) == [e for e in entries(text) if e != "antlr4-python3-runtime"]
    hashes = lambda t: t.count("--hash=")  # noqa: E731
    removed = text.split("antlr4-python3-runtime==", 1)[1].split("\n")
    own = 0
    for line in removed[1:]:
        if not line.startswith(" "):
            break
        own += line.count("--hash=")
    assert hashes(kept) == hashes(text) - own - removed[0].count("--hash=")
    assert uvwarm.without(text, set()) == text.rstrip("\n") + "\n"


def test_the_names_are_normalized_as_pep_503_says():
    lock = "Foo_Bar==1.0 \\\n    --hash=sha256:aa\nbaz==2 \\\n    --hash=sha256:bb\n"
    assert uvwarm.without(lock, {"foo-bar"}) == "baz==2 \\\n    --hash=sha256:bb\n"
