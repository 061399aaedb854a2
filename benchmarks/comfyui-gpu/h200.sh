#!/usr/bin/env bash
# The lent H200's steps of benchmarks/comfyui-gpu (README.md, RUNBOOK). Each step is one device
# call; the machine stays warm 30 s between calls, so ~/cg (W) outlives a call only when the
# next follows at once. Every step packs its logs and run directories into $OUT/<step>.tgz.
#
#   h200.sh flux2-weights PIECES   unpack the pieces present; FLUX.2 [dev] full-size files
#   h200.sh flux2-run PIECES       unpack (all pieces now); the FLUX.2 workflow as shipped, rigup's
#                                  defaults, under the 24 GiB cap; then the same with the image's
#                                  transformers (the failure a venv resolved today meets)
#   h200.sh ltx PIECES             FLUX.2 files out; LTX-2.3 full-size files; its workflow
#   h200.sh ltx-weights PIECES     (a fresh machine) unpack the pieces present; LTX-2.3's files
#   h200.sh ltx-services PIECES    unpack; the LTX workflow once per service in SERVICES
#                                  ("default reserve2": service-default.json, service-reserve2.json)
#
# SERVICE (default service-default.json beside the pieces folder) picks the rendered arguments.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STEP=$1
PIECES=$(cd "$2" && pwd)
W=${W:-/root/cg}
B=$W/base
M=$B/models
O=$W/logs/$STEP
SERVICE=${SERVICE:-$PIECES/../service-default.json}
G="python3 $HERE/comfyui-gpu"
mkdir -p "$W/pieces" "$O" "$M"

pack_out() {
    tar czf "$OUT/$STEP.tgz" -C "$W" logs runs 2>/dev/null || tar czf "$OUT/$STEP.tgz" -C "$W" logs
}
trap pack_out EXIT

machine() {
    {
        date -u
        nvidia-smi
        df -B1G / /dev/shm "$W"
        free -g
        nproc
        python3 -m pip list 2>/dev/null |
            grep -iE '^(torch|transformers|tokenizers|huggingface.hub|safetensors|numpy|regex|httpx|sentencepiece) '
    } >"$O/machine.txt" 2>&1
}

unpack() {
    cp "$PIECES"/comfyui-gpu.*.tar "$PIECES"/manifest.json "$W/pieces/"
    $G unpack --pieces "$W/pieces" --dest "$W" >"$O/unpack.json" 2>&1
}

# Text encoders on /dev/shm when the disk cannot hold the model's files with 4 GB to spare.
place() {
    local need_gb=$1 avail
    avail=$(df --output=avail -B1G "$W" | tail -1 | tr -dc 0-9)
    if [ "$avail" -lt $((need_gb + 4)) ] && [ ! -L "$M/text_encoders" ]; then
        rm -rf "$M/text_encoders"
        mkdir -p /dev/shm/te
        ln -s /dev/shm/te "$M/text_encoders"
        echo "text_encoders -> /dev/shm/te (disk avail ${avail} GB, need ${need_gb} GB)" >>"$O/place.txt"
    fi
}

weights() {
    (cd "$REPO" && PYTHONPATH="$W/site-transformers:$W/site" python3 -c \
        "import sys,types; m=types.ModuleType('lab'); m.__path__=['lab']; sys.modules['lab']=m
from lab.media.weights import main; sys.exit(main())" \
        --model "$1" --scale full --out "$M" --comfyui "$W/ComfyUI" --device cuda --no-verify) \
        >"$O/weights-$1.json" 2>"$O/weights-$1.err"
    ls -laR "$M" /dev/shm/te >"$O/files-$1.txt" 2>&1
    df -B1G / /dev/shm >>"$O/files-$1.txt" 2>&1
}

run() { # name workflow timeout sites... (extra --param from PARAMS)
    local name=$1 wf=$2 limit=$3
    shift 3
    local sites=()
    for s in "$@"; do sites+=(--site "$s"); done
    $G run --comfyui "$W/ComfyUI" "${sites[@]}" --base "$B" --run "$W/runs/$name" \
        --workflow "$REPO/files/comfyui/workflows/$wf.json" --service "$SERVICE" \
        --timeout "$limit" ${PARAMS:-} >"$O/run-$name.json" 2>&1
}

case $STEP in
flux2-weights)
    machine
    unpack
    place 58
    weights flux2
    ;;
flux2-run)
    unpack
    run flux2-default flux2-dev-t2i 400 "$W/site-transformers" "$W/site"
    if [ "$SECONDS" -lt 420 ]; then
        run flux2-image-transformers flux2-dev-t2i 90 "$W/site"
    fi
    ;;
ltx-weights)
    machine
    unpack
    place 53
    weights ltx2.3
    ;;
ltx-services) # after ltx-weights: the LTX workflow once per rendered service in SERVICES
    unpack
    for name in ${SERVICES:-default}; do
        SERVICE=$PIECES/../service-$name.json run "ltx-$name" ltx-2.3-t2v 200 \
            "$W/site-transformers" "$W/site"
    done
    ;;
ltx)
    rm -rf "$M/diffusion_models" "$M/vae" /dev/shm/te/* "$M/text_encoders"/* 2>/dev/null
    place 53
    weights ltx2.3
    run ltx-default ltx-2.3-t2v $((560 - SECONDS)) "$W/site-transformers" "$W/site"
    ;;
*)
    echo "unknown step $STEP" >&2
    exit 2
    ;;
esac
