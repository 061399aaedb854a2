#!/usr/bin/env bash
# Benchmark: build the vLLM venv from files/vllm/requirements.lock with uv and with pip, side by
# side on the same host, each with a cold cache of its own, and print times, ratio and disk use.
# Run on a converged host (it uses rigup's uv and the lock the deploy installed), e.g. the lab:
#   .venv/bin/python -m lab ssh -- bash -s < benchmarks/venv-build.sh
# It writes only under $BENCH_DIR (default /var/tmp/rigup-bench), removed at the end.
set -euo pipefail
uv=${UV:-/opt/rigup/uv/bin/uv}
lock=${LOCK:-/opt/rigup/vllm/requirements.lock}
python=${PYTHON:-python3}
dir=${BENCH_DIR:-/var/tmp/rigup-bench}
rm -rf "$dir"; mkdir -p "$dir/tmp"
export TMPDIR="$dir/tmp" UV_PYTHON_DOWNLOADS=never UV_SYSTEM_CERTS=1

t0=$(date +%s.%N)
UV_CACHE_DIR="$dir/uv-cache" "$uv" venv -q --python "$python" "$dir/uv-venv"
UV_CACHE_DIR="$dir/uv-cache" "$uv" pip sync -q --require-hashes --python "$dir/uv-venv/bin/python" "$lock"
t1=$(date +%s.%N)
"$python" -m venv "$dir/pip-venv"
"$dir/pip-venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir --require-hashes \
    --no-deps -r "$lock"
t2=$(date +%s.%N)

uv_s=$(python3 -c "print($t1 - $t0)"); pip_s=$(python3 -c "print($t2 - $t1)")
printf 'uv  (cold cache): %6.1f s  venv %s\n' "$uv_s" "$(du -sh "$dir/uv-venv" | cut -f1)"
printf 'pip (no cache)  : %6.1f s  venv %s\n' "$pip_s" "$(du -sh "$dir/pip-venv" | cut -f1)"
printf 'pip / uv        : %6.2fx\n' "$(python3 -c "print($pip_s / $uv_s)")"
for v in uv-venv pip-venv; do
    printf '%s: vllm %s\n' "$v" "$("$dir/$v/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))')"
done
rm -rf "$dir"
