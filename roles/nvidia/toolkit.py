"""The CUDA toolkit deploy (needs no GPU: the lab builds it)."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from roles.common.operations import uv_venv_synced
from roles.common.paths import Paths
from roles.nvidia.operations import cuda_home_linked
from roles.nvidia.paths import FILES, NvidiaPaths, cuda_env


@deploy("CUDA toolkit")
def cuda_toolkit() -> None:
    """CUDA toolkit ``cuda_toolkit_version`` (NVIDIA's PyPI wheels, locked) at
    ``<prefix>/cuda-<major.minor>/home``, on PATH for service users through :func:`cuda_env` and
    for login shells through /etc/profile.d/rigup-cuda.sh."""
    data = host.data
    p = Paths.from_data(data)
    np = NvidiaPaths.from_data(data)
    files.directory(name=f"Directory {np.cuda_root}", path=np.cuda_root, mode="755")
    files.put(
        name="CUDA toolkit lock file",
        src=str(FILES / "cuda-toolkit.lock"),
        dest=np.cuda_lock,
        mode="644",
    )
    uv_venv_synced(
        name=f"CUDA toolkit {data.cuda_toolkit_version} venv (uv, locked)",
        venv=np.cuda_venv,
        lock=np.cuda_lock,
        python="python3",
        uv=p.uv,
        cache_dir=p.uv_cache,
        tmp_dir=p.tmp,
    )
    cuda_home_linked(name=f"CUDA_HOME {np.cuda_home}", venv=np.cuda_venv, home=np.cuda_home)
    env = cuda_env(data)
    files.put(
        name="CUDA toolkit on PATH for login shells",
        src=StringIO(
            "# Managed by rigup (roles/nvidia): the pinned CUDA toolkit\n"
            f"export CUDA_HOME={env['CUDA_HOME']}\n"
            f'case ":$PATH:" in *":$CUDA_HOME/bin:"*) ;; *) PATH="$CUDA_HOME/bin:$PATH" ;; esac\n'
        ),
        dest="/etc/profile.d/rigup-cuda.sh",
        mode="644",
    )
