#!/usr/bin/env bash
# Quick GPU calibration of the Llama-2-7B and Llama-3-8B layer shapes (random
# weights, bf16), for a machine with an NVIDIA GPU and torch already installed,
# then a validation of the simulator against the real torch backend at
# Llama-2-7B shapes (scenarios/validate_gpu.yaml, continuous and chunked
# prefill; predicted with the Llama-2-7B profile just measured). Installs
# nothing. Each calibration is capped at SIMBATCH_GPU_CHECK_TIMEOUT seconds
# (default 150), the validation at SIMBATCH_GPU_CHECK_VALIDATE_TIMEOUT (default
# 180), and every step at what is left of SIMBATCH_GPU_CHECK_TOTAL (default
# 465), so the whole check stays under 8 minutes. The validation runs right
# after the first model's calibration (it needs that profile); set
# SIMBATCH_GPU_CHECK_VALIDATE=0 to skip it (on CPU it is skipped unless =1).
#
#   calibration/gpu_check.sh [OUT_DIR] [extra `simbatch calibrate` arguments...]
#
# OUT_DIR defaults to $OUT. It receives nvidia-smi.txt (the GPU, driver and
# clocks before the run), gpu_check.log (everything printed), and the profiles
# under calibration/profiles/<gpu>-<model>-bfloat16-tp1/, and validate/
# (validation.json, steps.csv, plots, each policy's measured and predicted run).
#
# For testing the script without a GPU: SIMBATCH_GPU_CHECK_DEVICE=cpu skips the
# nvidia-smi and CUDA checks and SIMBATCH_GPU_CHECK_MODELS="tiny" picks the
# shapes, e.g.  SIMBATCH_GPU_CHECK_DEVICE=cpu SIMBATCH_GPU_CHECK_MODELS=tiny \
#               calibration/gpu_check.sh /tmp/check --threads 1
# and with the validation too (about a minute on 2 cores):
#               SIMBATCH_GPU_CHECK_DEVICE=cpu SIMBATCH_GPU_CHECK_MODELS=tiny SIMBATCH_GPU_CHECK_VALIDATE=1 \
#               SIMBATCH_GPU_CHECK_VALIDATE_SCENARIO=scenarios/validate_cpu.yaml \
#               SIMBATCH_GPU_CHECK_VALIDATE_ARGS="--threads 1" \
#               calibration/gpu_check.sh /tmp/check --threads 1
# (the validation scenario must use the first model's shapes).
set -euo pipefail

out="${1:-${OUT:-}}"
if [[ -z "$out" ]]; then
    echo "usage: $0 OUT_DIR [calibrate args...]   (or set \$OUT)" >&2
    exit 2
fi
shift $(( $# > 0 ? 1 : 0 ))
device="${SIMBATCH_GPU_CHECK_DEVICE:-cuda}"
models="${SIMBATCH_GPU_CHECK_MODELS:-llama-2-7b llama-3-8b}"
limit="${SIMBATCH_GPU_CHECK_TIMEOUT:-150}"
# The validation is on by default on a GPU, off on CPU (a CPU dry run opts in, see above).
validate="${SIMBATCH_GPU_CHECK_VALIDATE:-$([[ "$device" == cpu ]] && echo 0 || echo 1)}"
validate_limit="${SIMBATCH_GPU_CHECK_VALIDATE_TIMEOUT:-180}"
total="${SIMBATCH_GPU_CHECK_TOTAL:-465}"
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
scenario="${SIMBATCH_GPU_CHECK_VALIDATE_SCENARIO:-$root/scenarios/validate_gpu.yaml}"
[[ "$scenario" = /* ]] || scenario="$root/$scenario"
# Seconds a step may take: its own cap, and never past the total.
budget() { local left=$(( total - SECONDS )); echo $(( $1 < left ? $1 : left )); }

run_validation() {
    local cap
    cap=$(budget "$validate_limit")
    if (( cap < 30 )); then
        say "FAIL: validation skipped, only ${cap}s left of ${total}s"
        return 1
    fi
    say "validating continuous and chunked_prefill on $device ($(basename "$scenario"), at most ${cap}s)"
    local start=$SECONDS
    # from $out: the profile just written under calibration/profiles/ is the one validate finds
    if (cd "$out" && timeout "$cap" "$python" -m simbatch validate "$scenario" --device "$device" \
            --policies continuous,chunked_prefill --out "$out/validate" ${SIMBATCH_GPU_CHECK_VALIDATE_ARGS:-}) \
            >> "$log" 2>&1; then
        say "validation done in $((SECONDS - start))s: $out/validate/validation.json"
        grep -A4 '^policy' "$log" | tail -5 | tee -a "$out/validate_table.txt" >&2 || true
    else
        say "FAIL: validation (exit $?) after $((SECONDS - start))s; see $log"
        return 1
    fi
}

status=0
first=1
for model in $models; do
    cap=$(budget "$limit")
    if (( cap < 30 )); then
        say "FAIL: $model skipped, only ${cap}s left of ${total}s"
        status=1
        continue
    fi
    say "calibrating $model on $device (quick, at most ${cap}s)"
    start=$SECONDS
    if (cd "$out" && timeout "$cap" "$python" -m simbatch calibrate --model "$model" --device "$device" \
            --quick "$@") >> "$log" 2>&1; then
        say "$model done in $((SECONDS - start))s"
    else
        say "FAIL: $model (exit $?) after $((SECONDS - start))s; see $log"
        status=1
    fi
    if (( first )) && [[ "$validate" != 0 ]]; then
        run_validation || status=1
    fi
    first=0
done
if [[ "$device" != cpu ]]; then
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
        >> "$out/nvidia-smi.txt" 2>&1 || true
fi
say "profiles: $(cd "$out" && ls -d calibration/profiles/*/ 2>/dev/null | tr '\n' ' ')"
exit $status
