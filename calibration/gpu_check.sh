#!/usr/bin/env bash
# Quick GPU calibration of the Llama-2-7B and Llama-3-8B layer shapes (random
# weights, bf16), for a machine with an NVIDIA GPU and torch already installed.
# Installs nothing. Takes a few minutes; each model is capped at
# SIMBATCH_GPU_CHECK_TIMEOUT seconds (default 210) so the whole check stays
# under 8 minutes.
#
#   calibration/gpu_check.sh [OUT_DIR] [extra `simbatch calibrate` arguments...]
#
# OUT_DIR defaults to $OUT. It receives nvidia-smi.txt (the GPU, driver and
# clocks before the run), gpu_check.log (everything printed), and the profiles
# under calibration/profiles/<gpu>-<model>-bfloat16-tp1/.
#
# For testing the script without a GPU: SIMBATCH_GPU_CHECK_DEVICE=cpu skips the
# nvidia-smi and CUDA checks and SIMBATCH_GPU_CHECK_MODELS="tiny" picks the
# shapes, e.g.  SIMBATCH_GPU_CHECK_DEVICE=cpu SIMBATCH_GPU_CHECK_MODELS=tiny \
#               calibration/gpu_check.sh /tmp/check --threads 1
set -euo pipefail

out="${1:-${OUT:-}}"
if [[ -z "$out" ]]; then
    echo "usage: $0 OUT_DIR [calibrate args...]   (or set \$OUT)" >&2
    exit 2
fi
shift $(( $# > 0 ? 1 : 0 ))
device="${SIMBATCH_GPU_CHECK_DEVICE:-cuda}"
models="${SIMBATCH_GPU_CHECK_MODELS:-llama-2-7b llama-3-8b}"
limit="${SIMBATCH_GPU_CHECK_TIMEOUT:-210}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python}"

mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu_check.log"
: > "$log"
say() { echo "gpu_check: $*" | tee -a "$log" >&2; }

if [[ "$device" == cpu ]]; then
    say "device cpu (SIMBATCH_GPU_CHECK_DEVICE=cpu): skipping the nvidia-smi and CUDA checks"
    echo "nvidia-smi: not run (device cpu)" > "$out/nvidia-smi.txt"
else
    if ! command -v nvidia-smi > /dev/null; then
        say "FAIL: nvidia-smi not found"
        exit 1
    fi
    nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || { say "FAIL: nvidia-smi failed"; cat "$out/nvidia-smi.txt" >&2; exit 1; }
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
        --format=csv >> "$out/nvidia-smi.txt" 2>&1 || true
    if ! "$python" -c 'import torch; assert torch.cuda.is_available()' >> "$log" 2>&1; then
        say "FAIL: torch cannot see a CUDA device"
        exit 1
    fi
fi
"$python" -c 'import sys, torch
print("gpu_check: python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' \
    2>&1 | tee -a "$log" >&2

# The source tree, whether or not simbatch is installed; run from $out so the
# default profile folder (calibration/profiles/...) lands there.
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
status=0
for model in $models; do
    say "calibrating $model on $device (quick, at most ${limit}s)"
    start=$SECONDS
    if (cd "$out" && timeout "$limit" "$python" -m simbatch calibrate --model "$model" --device "$device" \
            --quick "$@") >> "$log" 2>&1; then
        say "$model done in $((SECONDS - start))s"
    else
        say "FAIL: $model (exit $?) after $((SECONDS - start))s; see $log"
        status=1
    fi
done
if [[ "$device" != cpu ]]; then
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
        >> "$out/nvidia-smi.txt" 2>&1 || true
fi
say "profiles: $(cd "$out" && ls -d calibration/profiles/*/ 2>/dev/null | tr '\n' ' ')"
exit $status
