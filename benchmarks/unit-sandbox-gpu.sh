#!/usr/bin/env bash
# The sandbox of rigup's units, tried on a machine with NVIDIA GPUs (no systemd needed, nothing
# installed, no GPU setting changed). Usage, from the repository root, as root:
#   benchmarks/unit-sandbox-gpu.sh OUTDIR [INVENTORY]   (default inventory: inventory/h200x2.py)
# 1. The GPU services (vllm/comfyui/voxcpm.service): benchmarks/unit-sandbox/workload.py (NCCL
#    all-reduce over 2 GPUs, CUDA IPC, torch.compile, pinned and shared memory, setrlimit) as an
#    unprivileged user with no new privileges, plain, then under SystemCallFilter=@system-service
#    ~@privileged (EPERM), then also in a user namespace (PrivateUsers=). A positive control
#    (setuid to one's own uid, in @privileged) shows the filter is on.
# 2. The boot units: rigup-nvlink --json and rigup-gpu-power check (read-only) as root with no
#    capability (NVLink) or only CAP_SYS_ADMIN (power), no new privileges, under
#    @system-service ~@privileged @resources and MemoryDenyWriteExecute (PR_SET_MDWE); NVLink in a
#    user namespace too. Each run lists the system calls the filter refused.
# Needs python3 with torch, gcc, setpriv and unshare (util-linux); the syscall lists come from
# benchmarks/unit-sandbox/allowed-syscalls.py run where systemd is.
set -u
out=${1:?usage: $0 OUTDIR [INVENTORY]}
inventory=${2:-inventory/h200x2.py}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/unit-sandbox" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/rigup-sandbox.XXXXXX)
chmod 755 "$work"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
py=$(command -v python3)
names="$work/names.json"
$py - "$names" <<'PY'
import json, re, sys
nums = {}
for line in open("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"):
    m = re.match(r"#define __NR_(\w+)\s+(\d+)", line)
    if m:
        nums[m.group(1)] = int(m.group(2))
json.dump(nums, open(sys.argv[1], "w"))
PY
build() {  # list -> $work/<list>.so
    $py - "$here/syscalls-$1.txt" "$names" > "$work/allowed.h" <<'PY'
import json, sys
nums = json.load(open(sys.argv[2]))
allowed = sorted({nums[n] for n in open(sys.argv[1]).read().split() if n in nums})
print("static const int ALLOWED[] = {" + ",".join(map(str, allowed)) + "};")
PY
    gcc -O2 -shared -fPIC -I "$work" -o "$work/$1.so" "$here/seccomp_preload.c" || exit 1
}
build service
build boot
refused() {  # log -> names of refused calls with counts
    $py -c "import collections, json, sys
n = {v: k for k, v in json.load(open('$names')).items()}
c = collections.Counter(int(line.split()[1]) for line in open(sys.argv[1]))
print('refused:', dict((n.get(k, k), v) for k, v in c.items()) or 'none')" "$1"
}
echo "== $(uname -r); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); NVIDIA device groups: $(grep nvidia /proc/devices | awk '{print $2}' | tr '\n' ' ')" | tee "$out/summary.txt"

id rigup-sandbox >/dev/null 2>&1 || useradd -r -M -d "$work/home" rigup-sandbox
cp "$here/workload.py" "$work/"
chmod 644 "$work"/*
mkdir -p "$work/home" && chown rigup-sandbox: "$work/home"
user="setpriv --reuid=rigup-sandbox --regid=rigup-sandbox --clear-groups --no-new-privs"
service() {  # variant preload prefix...
    local v=$1 pre=$2; shift 2
    : > "$work/$v.log"; chmod 666 "$work/$v.log"
    local t0=$SECONDS
    "$@" env HOME="$work/home" TRITON_CACHE_DIR="$work/home/triton-$v" \
        TORCHINDUCTOR_CACHE_DIR="$work/home/inductor-$v" \
        VARIANT="$v" SANDBOX_LOG="$work/$v.log" ${pre:+LD_PRELOAD=$pre} "$py" "$work/workload.py" \
        > "$out/$v.txt" 2>&1
    echo "== GPU service, $v: exit $? in $((SECONDS - t0)) s; $(grep -E 'control|rank' "$out/$v.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
    refused "$work/$v.log" | tee -a "$out/summary.txt"
}
service plain "" $user
service filtered "$work/service.so" $user
service filtered-userns "$work/service.so" $user unshare --user --map-current-user

# The boot units' configuration from the inventory's settings, and their on-host tools.
mkdir -p "$work/bin" "$work/lib"
cp "$repo"/files/nvidia/rigup-* "$work/bin/"
cp -r "$repo/rigup" "$work/lib/rigup"
read -r gpus links watts < <(sed -n 's/.*"nvidia_gpu_count": \([0-9]*\).*/\1/p; s/.*"nvlink_expected_links": \([0-9]*\).*/\1/p' "$repo/$inventory" | tr '\n' ' '; echo 290)
printf '{"gpu_count": %s, "expected_links": %s, "required": true}\n' "$gpus" "$links" > "$work/nvlink.json"
printf '{"gpu_count": %s, "power_limit_w": %s, "persistence_mode": true}\n' "$gpus" "$watts" > "$work/power.json"
boot() {  # variant caps tool-args... (as root, bounded capabilities)
    local v=$1 caps=$2; shift 2
    : > "$work/$v.log"
    local prefix=(setpriv --bounding-set="$caps" --inh-caps=-all --no-new-privs)
    # as systemd does: the user namespace first (mapping root needs CAP_SETFCAP), then the drop
    [[ $v == *userns* ]] && prefix=(unshare --user --map-root-user "${prefix[@]}")
    "${prefix[@]}" env SANDBOX_LOG="$work/$v.log" SANDBOX_MDWE=1 LD_PRELOAD="$work/boot.so" \
        PYTHONPATH="$work/lib" "$py" "$@" > "$out/$v.txt" 2>&1
    echo "== boot unit, $v: exit $?; $(tail -1 "$out/$v.txt")" | tee -a "$out/summary.txt"
    refused "$work/$v.log" | tee -a "$out/summary.txt"
}
boot nvlink -all "$work/bin/rigup-nvlink" --json --config "$work/nvlink.json"
boot nvlink-userns -all "$work/bin/rigup-nvlink" --json --config "$work/nvlink.json"
boot power-check -all,+sys_admin "$work/bin/rigup-gpu-power" check --config "$work/power.json"
rm -rf "$work"
