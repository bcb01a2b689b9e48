#!/usr/bin/env bash
# The A/A of both A/B modes on one GPU, through the pull-request script:
#   1. resident: prgate --base HEAD --profiles default on decode and interference:
#      default against itself at HEAD, both servers up, memory split (0.9 -> 0.44);
#   2. sequential: the same A/A of interference with --vllm-ab-mode=sequential: the
#      sides booted in turn on one slot (CBBC), each with the profile's own memory.
# An A/A must pass; the intervals say how steady each mode holds a metric, and the
# prgate summaries say what each costs (wall and GPU minutes, boots in the log).
# Run from a copy of the repository (bench/gpu/gpu_jobs.sh start makes one); it makes that
# copy a git repository of its own, since a device command brings no .git.
# Needs vLLM importable (PYTHONPATH=~/vllm-site). Writes everything under $OUT.
set -uo pipefail
out=${OUT:-out/gpu-ab-modes}
cache=${VLLM_PERF_CACHE:-.vllm-perf-cache}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
common=(-p pytest_vllm_perf.plugin -p no:cacheprovider --vllm-model-preset=llama-8b
  --vllm-platform=cuda --vllm-boot-timeout=900 --vllm-cache-dir="$cache")
git_() { git -c user.name=gpu-gate -c user.email=gpu-gate@localhost "$@"; }
git_ init -q && git_ add -A && git_ commit -qm "the repository as staged" || exit 1

step() {  # NAME SELECT [PYTEST ARGS...]
  local name=$1 select=$2 started=$SECONDS
  shift 2
  python3 -m pytest_vllm_perf.tools.prgate examples --base HEAD --profiles default --stored '' \
    --out "$out/$name" -- -k "$select" "${common[@]}" "$@" 2>&1 | tee "$out/$name.log"
  echo "$name: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s" | tee -a "$out/times.txt"
}
step resident "decode or interference"
step sequential "interference" --vllm-ab-mode=sequential
tail -c 20000 "$cache"/logs/*.log > "$out/server-logs.txt" 2>/dev/null
exit 0
