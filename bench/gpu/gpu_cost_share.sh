#!/usr/bin/env bash
# What a test costs, checked on one GPU, and two pytest-xdist workers sharing it.
#   1. energy: the decode and interference examples (default profile, 8B-shaped preset,
#      --vllm-repeat=${REPEAT:-3}) with nvidia-smi sampling the GPU's power every 100 ms
#      beside them; bench/energy_check.py then integrates that power over each measured
#      pass's span (its Unix start and elapsed seconds in the JSON report) and sets it
#      beside the pass's NVML energy counter delta (energy_j);
#   2. share: the same two tests under `pytest -n 2 --vllm-workers-per-gpu 2`: each
#      worker boots its own server with a little under half the GPU's memory, both load
#      the GPU at once, and the controller writes one merged report.
# Usage, from a copy of the repository (bench/gpu/gpu_jobs.sh start makes one):
#   [PRESET=llama-8b] [REPEAT=3] bash bench/gpu/gpu_cost_share.sh [energy] [share]
# Needs vLLM, pytest-xdist and nvidia-ml-py importable (PYTHONPATH=~/vllm-site, where
# they are staged). Writes everything under $OUT.
set -uo pipefail
out=${OUT:-out/gpu-cost}
cache=${VLLM_PERF_CACHE:-.vllm-perf-cache}
mkdir -p "$out"
# the servers' logs come back also when a step is cut short (a lease's end, a timeout):
# the boot of a first try that ran out of device time was never seen
keep_logs() { tail -c 20000 "$cache"/logs/*.log > "$out/server-logs.txt" 2>/dev/null; nvidia-smi > "$out/nvidia-smi.txt" 2>&1; }
trap keep_logs EXIT
trap 'exit 143' TERM INT
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
common=(examples -k "decode or interference" -p pytest_vllm_perf.plugin -p no:cacheprovider
  -rA --vllm-model-preset="${PRESET:-llama-8b}" --vllm-platform=cuda --vllm-boot-timeout=900
  --vllm-cache-dir="$cache" --vllm-repeat="${REPEAT:-3}")
fields=timestamp,power.draw.instant,power.draw
nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits > /dev/null 2>&1 ||
  fields=timestamp,power.draw  # drivers before 535 have no instant reading
for step in "$@"; do
  start=$(date +%s)
  case $step in
  energy)
    nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits -lms 100 > "$out/power.csv" &
    smi=$!
    python3 -m pytest "${common[@]}" --vllm-json="$out/energy.json" \
      --vllm-markdown="$out/energy.md" 2>&1 | tee "$out/energy.log"
    kill "$smi"
    echo "power fields: $fields" > "$out/energy-check.txt"
    python3 bench/energy_check.py "$out/energy.json" "$out/power.csv" --fields "$fields" \
      >> "$out/energy-check.txt" 2>&1
    cat "$out/energy-check.txt"
    ;;
  share)
    python3 -m pytest "${common[@]}" -n 2 --vllm-workers-per-gpu=2 \
      --vllm-json="$out/share.json" --vllm-markdown="$out/share.md" 2>&1 | tee "$out/share.log"
    ;;
  esac
  echo "$step: $(($(date +%s) - start)) s" | tee -a "$out/times.txt"
done
exit 0
