"""base: the apt baseline, rigup's directory tree and a pinned uv for building venvs.

Settings (inventory/group_data/all.py): base_apt_packages, uv_version, rigup_prefix,
rigup_etc_dir, rigup_state_dir, rigup_tmp_dir, uv_cache_dir, and where Python packages come
from (uv_index_url, uv_extra_index_urls, uv_find_links, uv_offline: roles/common/uv.py).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import apt, server

from roles.common.facts import UvVersion
from roles.common.paths import Layout
from roles.common.placed import directory_placed, file_placed, survey
from roles.common.preflight import require_supported_host
from roles.common.service import service_tools
from roles.common.uv import PackageSources

#: uv itself, hash-pinned (installed by pip into <prefix>/uv)
UV_LOCK = Path(__file__).resolve().parents[2] / "files" / "base" / "uv.lock"


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

    directories = (
        (p.prefix, "755"),
        (p.etc, "755"),
        (p.state, "755"),
        (p.checks, "755"),
        (p.tmp, "700"),
        (p.uv_cache, "700"),
    )
    survey([*(path for path, _ in directories), f"{p.uv_venv}.lock"])
    for path, mode in directories:
        directory_placed(name=f"Directory {path}", path=path, user="root", group="root", mode=mode)

    # uv into a small venv of its own, by pip from files/base/uv.lock (hash-pinned, from the
    # host's package sources): no curl|sh installer, and upgraded or downgraded only when
    # uv_version changes.
    lock = f"{p.uv_venv}.lock"
    file_placed(name="uv lock file", src=str(UV_LOCK), dest=lock, mode="644")
    installed = host.get_fact(UvVersion, path=p.uv)
    if installed != data.uv_version:
        pip_args = shlex.join(PackageSources.from_data(data).pip_args())
        server.shell(
            name=f"Install uv {data.uv_version} (found: {installed or 'none'})",
            commands=[
                f"test -x {p.uv_venv}/bin/pip || python3 -m venv {p.uv_venv}",
                f"TMPDIR={shlex.quote(p.tmp)} {p.uv_venv}/bin/pip install --no-cache-dir "
                f"--disable-pip-version-check -q --require-hashes -r {shlex.quote(lock)} "
                f"{pip_args}".rstrip(),
            ],
        )

    service_tools(settings)
