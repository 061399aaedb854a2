#!/usr/bin/env bash
# Benchmark: GPU mode switches with rigup-mode on a converged host: the time of each switch (until
# every enabled service of the new mode answers its readiness check) and the mean per direction.
# Run on a converged host, e.g. the lab (ComfyUI on the CPU there, vLLM held back):
#   .venv/bin/python -m lab ssh -- bash -s < benchmarks/mode-switch.sh
# ROUNDS (default 3) switches each way; the host is left in the mode it was in.
set -euo pipefail
rounds=${ROUNDS:-3}
start=$(rigup-mode | sed -n 's/^mode: \([a-z]*\).*/\1/p')
now() { date +%s.%N; }
declare -A total=([llm]=0 [media]=0)
for i in $(seq "$rounds"); do
    for mode in llm media; do
        t0=$(now); rigup-mode "$mode" >/dev/null; t1=$(now)
        s=$(python3 -c "print(round($t1 - $t0, 2))")
        total[$mode]=$(python3 -c "print(${total[$mode]} + $s)")
        printf 'round %d: -> %-5s %6.2f s  (%s)\n' "$i" "$mode" "$s" \
            "$(systemctl show -p Wants --value "rigup-$mode.target" | xargs -r systemctl is-active | paste -sd' ' -)"
    done
done
for mode in llm media; do
    printf 'mean -> %-5s %6.2f s over %d switches\n' "$mode" "$(python3 -c "print(${total[$mode]} / $rounds)")" "$rounds"
done
[ -n "$start" ] && [ "$start" != none ] && rigup-mode "$start" >/dev/null
