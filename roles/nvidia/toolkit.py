"""The CUDA toolkit deploy (needs no GPU: the lab builds it)."""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy

from roles.common.placed import directory_placed, file_placed
from roles.common.venv import locked_venv
from roles.nvidia.cuda_headers import MATH_FUNCTIONS_H
from roles.nvidia.operations import cuda_home_linked, cuda_math_header_patched
from roles.nvidia.paths import FILES, NvidiaPaths, cuda_env


@deploy("CUDA toolkit")
def cuda_toolkit(settings) -> None:
    """CUDA toolkit ``cuda_toolkit_version`` (NVIDIA's PyPI wheels, locked) at
    ``<prefix>/cuda-<major.minor>/home``, on PATH for service users through :func:`cuda_env` and
    for login shells through /etc/profile.d/rigup-cuda.sh; on glibc >= 2.42 its math header gets
    the ``noexcept(true)`` nvcc 13.0 needs there (roles/nvidia/cuda_headers.py)."""
    np = NvidiaPaths.from_data(settings)
    directory_placed(name=f"Directory {np.cuda_root}", path=np.cuda_root, mode="755")
    locked_venv(
        settings,
        what="CUDA toolkit",
        contents=f"cuda-toolkit {settings.cuda_toolkit_version} wheels",
        lock_src=FILES / "cuda-toolkit.lock",
        lock=np.cuda_lock,
        venv=np.cuda_venv,
        python="python3",
    )
    cuda_home_linked(name=f"CUDA_HOME {np.cuda_home}", venv=np.cuda_venv, home=np.cuda_home)
    # every run, after the install: a venv built again is edited again (cuda_headers.py says why)
    cuda_math_header_patched(
        name=f"{MATH_FUNCTIONS_H}: rsqrt/rsqrtf noexcept where glibc >= 2.42",
        home=np.cuda_home,
    )
    env = cuda_env(settings)
    file_placed(
        name="CUDA toolkit on PATH for login shells",
        src=StringIO(
            "# Managed by rigup (roles/nvidia): the pinned CUDA toolkit\n"
            f"export CUDA_HOME={env['CUDA_HOME']}\n"
            f'case ":$PATH:" in *":$CUDA_HOME/bin:"*) ;; *) PATH="$CUDA_HOME/bin:$PATH" ;; esac\n'
        ),
        dest="/etc/profile.d/rigup-cuda.sh",
        mode="644",
    )
