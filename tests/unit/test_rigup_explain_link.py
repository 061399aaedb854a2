"""rigup-explain runs by name: the base role links it into /usr/local/bin (roles/common/service.py
service_tools), and through that link it still finds the package rigup beside its own bin/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_rigup_explain_imports_rigup_through_its_path_link(tmp_path):
    prefix, link_dir = tmp_path / "opt-rigup", tmp_path / "usr-local-bin"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    link_dir.mkdir()
    shutil.copy2(REPO / "files" / "common" / "rigup-explain", prefix / "bin" / "rigup-explain")
    (prefix / "lib" / "rigup").symlink_to(REPO / "rigup", target_is_directory=True)
    (link_dir / "rigup-explain").symlink_to(prefix / "bin" / "rigup-explain")
    out = subprocess.run(
        [sys.executable, "-I", str(link_dir / "rigup-explain"), "--help"],
        capture_output=True,
        text=True,
        cwd="/",
        check=False,
    )
    assert out.returncode == 0 and "Usage: rigup-explain UNIT" in out.stdout, out.stderr
