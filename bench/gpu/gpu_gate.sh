#!/usr/bin/env bash
# The pull-request gate on one GPU, through the workflow's own script:
#   1. re-save the baselines of the selected examples (profile default, one boot),
#      as the workflow's dispatch does (prgate --no-ab --stored-mode=save);
#   2. a pull request that adds a serving profile with a planted regression
#      (max_num_seqs 24 under 32 users): prgate --base HEAD~1 judges it by A/B against
#      default at the base, then reruns the stored baselines on a fresh boot.
# Run from a copy of the repository (bench/gpu/gpu_jobs.sh start makes one); it makes that
# copy a git repository of its own, since a device command brings no .git.
# Needs vLLM importable (PYTHONPATH=~/vllm-site). Writes everything under $OUT.
set -uo pipefail
out=${OUT:-out/gpu-gate}
cache=${VLLM_PERF_CACHE:-.vllm-perf-cache}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
select=${GATE_SELECT:-decode or interference}
pytest_args=(-k "$select" -p pytest_vllm_perf.plugin -p no:cacheprovider
  --vllm-model-preset=llama-8b --vllm-platform=cuda --vllm-boot-timeout=900
  --vllm-cache-dir="$cache")
git_() { git -c user.name=gpu-gate -c user.email=gpu-gate@localhost "$@"; }

git_ init -q && git_ add -A && git_ commit -qm "the repository as staged" || exit 1
rm -rf .vllm-perf/1x-nvidia-h200  # measured on an older preset: re-saved below
started=$SECONDS
python3 -m pytest_vllm_perf.tools.prgate examples --base HEAD --no-ab --stored-mode=save \
  --out "$out/save" -- "${pytest_args[@]}" 2>&1 | tee "$out/save.log"
echo "save: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s" | tee -a "$out/times.txt"
tar czf "$out/baselines.tgz" .vllm-perf
git_ add -A .vllm-perf && git_ commit -qm "baselines saved on this GPU"

printf 'description: planted regression, one sequence cap below the users\nengine:\n  max_num_seqs: 24\n' \
  > profiles/planted.yaml
git_ add profiles/planted.yaml && git_ commit -qm "a pull request: add a serving profile"
started=$SECONDS
python3 -m pytest_vllm_perf.tools.prgate examples --base HEAD~1 --out "$out/pr" \
  -- "${pytest_args[@]}" 2>&1 | tee "$out/pr.log"
echo "pr: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s" | tee -a "$out/times.txt"
tail -c 20000 "$cache"/logs/*.log > "$out/server-logs.txt" 2>/dev/null
exit 0
