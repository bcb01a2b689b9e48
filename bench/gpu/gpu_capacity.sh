#!/usr/bin/env bash
# The capacity search on one GPU (8B preset):
#   1. capacity A/B: examples/test_capacity.py with --vllm-profile=chunked
#      --vllm-ab=default: both servers up (memory split), each side's capacity under the
#      example's cuda SLO (p99 TTFT <= 1000 ms, p99 ITL <= 100 ms) searched pass by pass
#      in turn (ABBA), and the ratio chunked / default with its 95% interval;
#   2. multi-turn: examples/test_multi_turn.py, prefix caching on (default) and off
#      (no-prefix-cache): TTFT by turn and the prefix-cache hit rate.
# The capacity lines are in capacity-ab.log (the progress lines and the test's line);
# the multi-turn metrics in multi-turn.json. Run from a copy of the repository
# (bench/gpu/gpu_jobs.sh start makes one). Needs vLLM importable (PYTHONPATH=~/vllm-site).
# Writes everything under $OUT.
set -uo pipefail
out=${OUT:-out/gpu-capacity}
cache=${VLLM_PERF_CACHE:-.vllm-perf-cache}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
common=(-p pytest_vllm_perf.plugin -p no:cacheprovider -rA --vllm-model-preset=llama-8b
  --vllm-platform=cuda --vllm-boot-timeout=900 --vllm-cache-dir="$cache")
step() {  # NAME PYTEST ARGS...
  local name=$1 started=$SECONDS
  shift
  python3 -m pytest "$@" "${common[@]}" 2>&1 | tee "$out/$name.log"
  echo "$name: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s" | tee -a "$out/times.txt"
}
step capacity-ab examples/test_capacity.py --vllm-profile=chunked --vllm-ab=default \
  --vllm-json="$out/capacity-ab.json"
step multi-turn examples/test_multi_turn.py --vllm-json="$out/multi-turn.json"
tail -c 20000 "$cache"/logs/*.log > "$out/server-logs.txt" 2>/dev/null
exit 0
