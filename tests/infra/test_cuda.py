"""CUDA toolkit (roles/nvidia cuda_toolkit): the pinned nvcc on the service users' PATH and able
to build for the rig's GPUs. Needs no GPU, so it runs on the lab too."""

import shlex

from roles.nvidia import NvidiaPaths, cuda_env

KERNEL = r"""
__global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
int main() { return 0; }
"""


def test_nvcc_is_the_pinned_release(host, data):
    home = NvidiaPaths.from_data(data).cuda_home
    out = host.run(f"{home}/bin/nvcc --version")
    assert out.rc == 0, f"no nvcc under {home}: {out.stderr.strip()} (run deploys/nvidia.py)"
    major_minor = ".".join(data.get("cuda_toolkit_version").split(".")[:2])
    assert f"release {major_minor}," in out.stdout, (
        f"nvcc is not CUDA {major_minor}: {out.stdout.strip().splitlines()[-2:]}"
    )


def test_service_environment_puts_nvcc_first_on_path(host, data):
    env = cuda_env(data)
    out = host.run(f"env -i PATH={shlex.quote(env['PATH'])} sh -c 'command -v nvcc'")
    assert out.stdout.strip() == f"{env['CUDA_HOME']}/bin/nvcc", (
        f"PATH of the services finds {out.stdout.strip() or 'no nvcc'}"
    )


def test_nvcc_builds_and_links_for_the_3090(host, data):
    """Compile and link a kernel for sm_86 (RTX 3090): headers, cicc, ptxas, cudart, lib64."""
    home = NvidiaPaths.from_data(data).cuda_home
    out = host.run(
        "d=$(mktemp -d) && cat > $d/k.cu <<'EOF'\n" + KERNEL + "\nEOF\n"
        f"{home}/bin/nvcc -arch=sm_86 -o $d/k $d/k.cu && $d/k && "
        f"{home}/bin/nvcc -arch=sm_86 -cubin -o $d/k.cubin $d/k.cu && test -s $d/k.cubin; "
        "rc=$?; rm -rf $d; exit $rc"
    )
    assert out.rc == 0, f"nvcc could not build for sm_86: {out.stdout}{out.stderr}"
