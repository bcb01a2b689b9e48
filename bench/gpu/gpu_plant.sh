#!/usr/bin/env bash
# Planted regressions of known size through the pull-request gate on one GPU:
#   1. l34: a commit that adds hf_overrides {num_hidden_layers: 34} to a profile of the
#      32-layer llama-8b preset (about x1.055 more weight read a decode step), judged
#      against its parent: must fail;
#   2. aa: the same commit against itself: must pass;
#   3. l33: 33 layers (about x1.03) against the 32-layer commit: reported with its
#      interval (the goal: it fails too);
#   warm: boots both shapes of l34 (32 and 34 layers) once, through the same gate with a
#      one-second test, so that the compile cache is warm for a following l34 (issue
#      acceptance: GPU minutes with a warm cache); its own minutes are stated apart.
# Usage: [TESTS=EXPR] [MAX_PAIRS=N] bash bench/gpu/gpu_plant.sh [warm] [l34] [aa] [l33]
# Each is `prgate examples --base REV --profiles plant --stored ''` on the example tests
# that `-k "$TESTS"` selects (default `decode`; `decode or interference` for both), both
# servers resident, memory split, passes alternated ABBA, the sequential A/B decision
# from 8 pairs up to MAX_PAIRS (default 16), one settle pass a side first. The prgate
# summaries state wall and GPU minutes.
# Run from a copy of the repository (bench/gpu/gpu_jobs.sh start makes one); it makes that
# copy a git repository of its own, since a device command brings no .git.
# Needs vLLM importable (PYTHONPATH=~/vllm-site). Writes everything under $OUT.
set -uo pipefail
out=${OUT:-out/gpu-plant}
cache=${VLLM_PERF_CACHE:-.vllm-perf-cache}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
common=(-p pytest_vllm_perf.plugin -p no:cacheprovider --vllm-model-preset=llama-8b
  --vllm-platform=cuda --vllm-boot-timeout=900 --vllm-cache-dir="$cache")
git_() { git -c user.name=gpu-gate -c user.email=gpu-gate@localhost "$@"; }
plant() {  # LAYERS (empty: none)
  if [ -z "$1" ]; then
    printf 'description: the 32-layer preset as it ships\n' > profiles/plant.yaml
  else
    printf 'description: %s layers of the 32-layer preset\nengine:\n  hf_overrides:\n    num_hidden_layers: %s\n' \
      "$1" "$1" > profiles/plant.yaml
  fi
}
plant ""
# the warm-up's test: booting is the point, so its load is one second of two short streams
mkdir -p warm
printf '%s\n' 'def test_warm(vllm_perf):' \
  '    vllm_perf.run("decode", duration_s=1, chat={"users": 2, "prompt_tokens": 16, "output_tokens": 16})' \
  > warm/test_warm.py
git_ init -q && git_ add -A && git_ commit -qm "32 layers" || exit 1
plant 34
git_ commit -qam "34 layers" || exit 1

step() {  # NAME BASE [PATH [-k EXPR]]
  local name=$1 base=$2 path=${3:-examples} started=$SECONDS
  local select=(-k "${TESTS:-decode}")
  [ "$path" = examples ] || select=()
  python3 -m pytest_vllm_perf.tools.prgate "$path" --base "$base" --profiles plant --stored '' \
    --out "$out/$name" -- "${select[@]}" --vllm-ab-max-pairs="${MAX_PAIRS:-16}" \
    "${common[@]}" 2>&1 | tee "$out/$name.log"
  echo "$name: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s" | tee -a "$out/times.txt"
}
# the steps to run, in order (default all three): a lost machine need not cost the finished ones
steps=${*:-l34 aa l33}
for name in $steps; do
  case $name in
  warm) MAX_PAIRS=8 step warm HEAD~1 warm ;;
  l34) step l34 HEAD~1 ;;
  aa) step aa HEAD ;;
  l33) plant 33 && git_ commit -qam "33 layers" && step l33 HEAD~2 ;;
  esac
done
tail -c 20000 "$cache"/logs/*.log > "$out/server-logs.txt" 2>/dev/null
exit 0
