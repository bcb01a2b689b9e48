#!/usr/bin/env bash
# The example suite on a GPU machine with the Llama-3.1-8B-shaped preset (dummy weights).
# Usage, from the repository root: bench/gpu/gpu_suite.sh TAG [pytest args...]
# Needs vLLM importable (on the lent H200: PYTHONPATH=~/vllm-site, where it is staged).
# The GPU experiment profiles (half-gpu*, one-gpu-*, tp2-*) live in bench/profiles/.
# Writes TAG.json, TAG.md, TAG.log and tarballs of the baselines and plots to $OUT (or out/gpu).
set -uo pipefail
out=${OUT:-out/gpu}
cache=${VLLM_PERF_CACHE:-.vllm-perf-cache}
tag=$1
shift
mkdir -p "$out"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -m pytest examples -p pytest_vllm_perf.plugin -p no:cacheprovider -rA \
  --vllm-model-preset=llama-8b --vllm-platform=cuda --vllm-boot-timeout=900 \
  --vllm-cache-dir="$cache" --vllm-profiles-dir=bench/profiles \
  --vllm-json="$out/$tag.json" --vllm-markdown="$out/$tag.md" --vllm-plots="$out/plots-$tag" \
  "$@" 2>&1 | tee "$out/$tag.log"
rc=${PIPESTATUS[0]}
[ -d .vllm-perf ] && tar czf "$out/$tag-baselines.tgz" .vllm-perf
[ -d "$out/plots-$tag" ] && tar czf "$out/$tag-plots.tgz" -C "$out" "plots-$tag" && rm -rf "$out/plots-$tag"
tail -c 20000 "$cache"/logs/*.log > "$out/$tag-server-logs.txt" 2>/dev/null
exit "$rc"
