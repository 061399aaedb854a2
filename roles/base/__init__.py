"""base: the apt baseline, rigup's directory tree and a pinned uv for building venvs.

Settings (inventory/group_data/all.py): base_apt_packages, uv_version, rigup_prefix,
rigup_etc_dir, rigup_state_dir, rigup_tmp_dir, uv_cache_dir.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import apt, files, server

from roles.common.facts import UvVersion
from roles.common.paths import Layout
from roles.common.preflight import require_supported_host
from roles.common.service import service_tools


@deploy("rigup base")
def base(settings) -> None:
    """Apt baseline, directories, uv ``uv_version`` in its own venv at ``<prefix>/uv`` and the
    services' tools ``<prefix>/bin/wait-ready`` and ``rigup-start``.

    Raises ``DeployError`` before any change when the host is not a Debian/Ubuntu with systemd.
    """
    data = settings
    require_supported_host()
    p = Layout.from_data(data)

    apt.update(name="Refresh apt lists (at most daily)", cache_time=24 * 3600)
    apt.packages(name="Install the apt baseline", packages=list(data.base_apt_packages))

    for path, mode in (
        (p.prefix, "755"),
        (p.etc, "755"),
        (p.state, "755"),
        (p.checks, "755"),
        (p.tmp, "700"),
        (p.uv_cache, "700"),
    ):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode=mode)

    # uv from PyPI into a small venv of its own: pinned, no curl|sh installer, and upgraded or
    # downgraded only when uv_version changes.
    installed = host.get_fact(UvVersion, path=p.uv)
    if installed != data.uv_version:
        server.shell(
            name=f"Install uv {data.uv_version} (found: {installed or 'none'})",
            commands=[
                f"test -x {p.uv_venv}/bin/pip || python3 -m venv {p.uv_venv}",
                f"TMPDIR={shlex.quote(p.tmp)} {p.uv_venv}/bin/pip install --no-cache-dir "
                f"--disable-pip-version-check -q uv=={data.uv_version}",
            ],
        )

    service_tools(settings)
