#!/usr/bin/env bash
# Read-only run of rigup's NVIDIA layer on a machine with NVIDIA GPUs (never changes a GPU
# setting: no -pl, -pm, clocks, resets). Usage, from the repository root:
#   benchmarks/nvidia-readonly.sh OUTDIR [INVENTORY]   (default inventory: inventory/h200x2.py)
# Writes into OUTDIR: captures of the exact commands rigup's facts run, the facts as rigup parses
# them, the NVLink verification, the power-limit check (read-back only), the driver diagnosis,
# the P2P bandwidth probe, a dry pyinfra plan of deploys/nvidia.py with the real facts, and the
# GPU testinfra module's report. Needs python3 with torch (the probe), pyinfra and
# pytest-testinfra importable.
set -u
out=${1:?usage: $0 OUTDIR [INVENTORY]}
inventory=${2:-inventory/h200x2.py}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}

# Expectations of the inventory host, from rigup's own settings loader.
read -r gpus links link_gbps watts < <($py - "$inventory" <<'PY'
import sys
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory
ctx_state.set(State())
h = list(make_inventory(sys.argv[1], cwd="."))[0]
d = h.data
print(d.nvidia_gpu_count, d.nvlink_expected_links, d.nvlink_link_gbps, d.nvidia_power_limit_w)
PY
)
echo "expectations: $gpus GPUs, $links links/GPU x $link_gbps GB/s, power limit $watts W" | tee "$out/summary.txt"

# 1. Captures of the facts' own commands.
$py - "$out" <<'PY'
import json, subprocess, sys
from roles.nvidia import facts, parsers
out = sys.argv[1]
caps = {
    "pci-gpus.txt": facts.NvidiaPciGpus().command(),
    "driver-state.txt": facts.NvidiaDriverState().command(),
    "packages.txt": facts.NvidiaPackages().command(),
    "query-gpu.txt": parsers.GPU_QUERY_COMMAND,
    "interconnect.txt": facts.NvidiaInterconnect().command(),
}
parsed = {}
for name, cmd in caps.items():
    text = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout
    open(f"{out}/{name}", "w").write(text)
    fact = {"pci-gpus.txt": facts.NvidiaPciGpus, "driver-state.txt": facts.NvidiaDriverState,
            "packages.txt": facts.NvidiaPackages, "query-gpu.txt": facts.NvidiaGpus,
            "interconnect.txt": facts.NvidiaInterconnect}[name]()
    lines = text.splitlines()
    parsed[name] = fact.process(lines) if lines else None
def plain(o):
    if isinstance(o, dict):
        return {"-".join(map(str, k)) if isinstance(k, tuple) else k: plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    return plain(vars(o)) if hasattr(o, "__dict__") else o
json.dump(plain(parsed), open(f"{out}/facts.json", "w"), indent=1)
print("facts parsed:", {k: (type(v).__name__) for k, v in parsed.items()})
PY

# 2. The on-target tools, read-only modes only.
cfg=$(mktemp -d)
printf '{"gpu_count": %s, "expected_links": %s, "required": true}\n' "$gpus" "$links" > "$cfg/nvlink.json"
printf '{"gpu_count": %s, "power_limit_w": %s, "persistence_mode": true}\n' "$gpus" "$watts" > "$cfg/power.json"
mkdir -p "$cfg/lib" "$cfg/bin" && cp -r rigup "$cfg/lib/rigup" && cp files/nvidia/rigup-* "$cfg/bin/"
{ echo "## rigup-nvlink --json (no --env-out: check only)"; $py "$cfg/bin/rigup-nvlink" --json --config "$cfg/nvlink.json"; echo "exit $?"
  echo "## rigup-gpu-power check (read-back only, never apply here)"; $py "$cfg/bin/rigup-gpu-power" check --config "$cfg/power.json"; echo "exit $?"
  echo "## rigup-nvidia-diagnose"; $py "$cfg/bin/rigup-nvidia-diagnose"; echo "exit $?"
} > "$out/tools.txt" 2>&1
cat "$out/tools.txt"

# 3. Bandwidth probe (a benchmark: figures and ratio, no threshold).
expected=$($py -c "print($links * $link_gbps)")
$py files/nvidia/rigup-p2p-bandwidth --expected-gbps "$expected" 2>&1 | tee "$out/p2p-bandwidth.txt"

# 4. A dry plan of deploys/nvidia.py with the real facts (changes nothing).
${PYINFRA:-$py -m pyinfra} --dry "$inventory" deploys/nvidia.py > "$out/plan-nvidia.txt" 2>&1
echo "dry plan exit $?" | tee -a "$out/summary.txt"; tail -25 "$out/plan-nvidia.txt"

# 5. The GPU testinfra module with this inventory's expectations.
$py -m pytest -p no:cacheprovider tests/infra/test_gpu.py --inventory "$inventory" -rA -q > "$out/testinfra-gpu.txt" 2>&1
echo "testinfra exit $?" | tee -a "$out/summary.txt"; grep -E "^(PASSED|FAILED|SKIPPED|ERROR)|passed|failed|^E  " "$out/testinfra-gpu.txt" | head -40
