#!/usr/bin/env bash
# Benchmark: the ComfyUI venv and start on a converged host (the lab, or a rig): build the venv
# from the deployed lock (/opt/rigup/comfyui/requirements.lock) with rigup's uv twice, once with
# a cold uv cache of its own and once with the host's cache (warm after the deploy), and print
# times and disk; then restart comfyui.service and time it to the first answer of
# GET /system_stats; then say which wheels of the host's uv cache the ComfyUI venv shares with
# the other venvs (vLLM, VoxCPM2): the same file (inode) in both venvs.
#   .venv/bin/python -m lab ssh -- bash -s < benchmarks/comfyui-venv.sh
# It writes only under $BENCH_DIR (default /var/tmp/rigup-bench-comfyui), removed at the end;
# COLD=0 skips the cold build (it downloads every wheel again, ~3 GB).
set -euo pipefail
uv=${UV:-/opt/rigup/uv/bin/uv}
lock=${LOCK:-/opt/rigup/comfyui/requirements.lock}
python=${PYTHON:-python3}
cache=${UV_CACHE:-/var/cache/rigup/uv}
dir=${BENCH_DIR:-/var/tmp/rigup-bench-comfyui}
port=${PORT:-$(python3 -c "import json; a=json.load(open('/etc/rigup/comfyui/main-args.json')); print(a[a.index('--port') + 1])")}
rm -rf "$dir"; mkdir -p "$dir/tmp"
export TMPDIR="$dir/tmp" UV_PYTHON_DOWNLOADS=never UV_SYSTEM_CERTS=1
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.1f}')"; }

build() {  # build <name> <cache dir>
    local t0 t1
    t0=$(now)
    UV_CACHE_DIR="$2" "$uv" venv -q --python "$python" "$dir/$1"
    UV_CACHE_DIR="$2" "$uv" pip sync -q --require-hashes --python "$dir/$1/bin/python" "$lock"
    t1=$(now)
    printf '%-22s %7s s  venv %s (apparent %s)\n' "venv, $1 cache:" "$(secs "$t0" "$t1")" \
        "$(du -sh "$dir/$1" | cut -f1)" "$(du -sh --apparent-size "$dir/$1" | cut -f1)"
}
echo "python: $("$python" --version), lock: $lock ($(grep -c '^[a-z].*==' "$lock") packages)"
if [ "${COLD:-1}" = 1 ]; then build cold "$dir/uv-cache"; fi
build warm "$cache"
rm -rf "$dir/cold" "$dir/uv-cache" "$dir/warm"

t0=$(now)
systemctl restart comfyui.service
until curl -fsS --max-time 2 "http://127.0.0.1:$port/system_stats" >/dev/null 2>&1; do sleep 0.2; done
t1=$(now)
printf 'comfyui.service restart to GET /system_stats: %s s\n' "$(secs "$t0" "$t1")"

echo "wheels the ComfyUI venv shares with another venv (the same files, hard links of one uv cache entry):"
python3 - <<'PY'
import glob, os
def dists(venv):
    site = glob.glob(f"{venv}/lib/python3*/site-packages")
    if not site:
        return None, {}
    out = {}
    for rec in glob.glob(f"{site[0]}/*.dist-info/RECORD"):
        files = [line.split(",")[0] for line in open(rec) if ".dist-info/" not in line.split(",")[0]]
        out[os.path.basename(os.path.dirname(rec))] = files
    return site[0], out
site, mine = dists("/opt/rigup/comfyui/venv")
for other in sorted(glob.glob("/opt/rigup/*/venv")):
    if other.startswith("/opt/rigup/comfyui/"):
        continue
    osite, theirs = dists(other)
    if not osite:
        continue
    same, size, names, apart = 0, 0, [], []
    for dist in sorted(set(mine) & set(theirs)):
        files = [f for f in mine[dist] if os.path.isfile(f"{site}/{f}") and os.path.isfile(f"{osite}/{f}")]
        if files and all(os.stat(f"{site}/{f}").st_ino == os.stat(f"{osite}/{f}").st_ino for f in files[:20]):
            same += 1
            size += sum(os.path.getsize(f"{site}/{f}") for f in files)
            names.append(dist.removesuffix(".dist-info"))
        elif files:
            apart.append(dist.removesuffix(".dist-info"))
    py = os.path.basename(glob.glob(f"{other}/lib/python3*")[0])
    print(f"  {other} ({py}): {same} distributions, {size / 1e9:.2f} GB shared: {' '.join(names)}")
    print(f"    same version, separate files (another wheel: CPython tag): {' '.join(apart) or '-'}")
PY
echo "uv cache: $(du -sh "$cache" | cut -f1); its torch wheels:"
ls -d "$cache"/wheels-*/pypi/torch/*-manylinux* | grep -v '\.\(http\|lock\)$' | sed 's/^/  /' || true
rm -rf "$dir"
