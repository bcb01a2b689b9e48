#!/usr/bin/env bash
# A vLLM upgrade judged on one GPU: 0.25.1 against 0.26.0 through the pull-request gate.
#   1. gate: a scratch repository whose commit changes only .github/gpu-constraints.txt's
#      pin (vllm==0.25.1 -> vllm==0.26.0); `prgate --base HEAD~1` finds the upgrade and
#      runs the example tests `-k "$TESTS"` as an A/B of the two releases (the base side
#      on BASE_PYTHON, 0.25.1), both servers resident, up to MAX_PAIRS pairs;
#   2. crosscheck: on two fresh servers of the same two releases (half-gpu each),
#      the plugin's A/B of a decode load and `vllm bench serve`'s output throughput on
#      each (bench/gpu/gpu_crosscheck.py --base-python): whether the two ratios agree.
# Usage: [TESTS=EXPR] [MAX_PAIRS=N] [PRESET=llama-8b] bash bench/gpu/gpu_upgrade.sh [gate] [crosscheck]
# (PLATFORM=cpu, PYTHON, BASE_EXEC, PLUGIN_ARGS= and XC_ARGS rehearse it on the CPU engine)
# Needs 0.26.0 importable (PYTHONPATH=~/vllm-site) and 0.25.1's packages in ~/vllm-site2
# (../shared/gpu/README.md: a second stash, VLLM_STASH=~/stash2 and SITE ~/vllm-site2).
# Run from a copy of the repository (bench/gpu/gpu_jobs.sh start makes one). Writes under $OUT.
set -uo pipefail
out=${OUT:-out/gpu-upgrade}
cache=${VLLM_PERF_CACHE:-.vllm-perf-cache}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
base_python=${BASE_PYTHON:-$HOME/py-vllm-0.25.1}
# the base release's interpreter: 0.25.1's packages ahead of 0.26.0's, whose other
# dependencies it shares; flashinfer's cubin package, if the image has one, is 0.26.0's
cat > "$base_python" <<EOF
#!/bin/sh
export PYTHONPATH=$HOME/vllm-site2:$HOME/vllm-site
export FLASHINFER_DISABLE_VERSION_CHECK=1
exec ${BASE_EXEC:-python3} "\$@"
EOF
chmod +x "$base_python"
"$base_python" -c "import vllm; print('base side: vllm', vllm.__version__)" 2>&1 | tail -1 | tee "$out/versions.txt"
${PYTHON:-python3} -c "import vllm; print('candidate side: vllm', vllm.__version__)" 2>&1 | tail -1 | tee -a "$out/versions.txt"
# shellcheck disable=SC2206 # the plugin by module where no entry point installed it
common=(${PLUGIN_ARGS--p pytest_vllm_perf.plugin} -p no:cacheprovider --vllm-model-preset="${PRESET:-llama-8b}"
  --vllm-platform="${PLATFORM:-cuda}" --vllm-boot-timeout=900 --vllm-cache-dir="$cache")
git_() { git -c user.name=gpu-gate -c user.email=gpu-gate@localhost "$@"; }

gate() {
  local started=$SECONDS
  printf 'vllm==0.25.1\n' > .github/gpu-constraints.txt
  git_ init -q && git_ add -A && git_ commit -qm "on vLLM 0.25.1" || return 1
  printf 'vllm==0.26.0\n' > .github/gpu-constraints.txt
  git_ commit -qam "vLLM 0.26.0" || return 1
  ${PYTHON:-python3} -m pytest_vllm_perf.tools.prgate examples --base HEAD~1 --stored '' \
    --pin-files .github/gpu-constraints.txt --upgrade-python "$base_python" --out "$out/gate" \
    -- -k "${TESTS:-decode or interference}" --vllm-ab-max-pairs="${MAX_PAIRS:-12}" \
    "${common[@]}" 2>&1 | tee "$out/gate.log"
  echo "gate: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s" | tee -a "$out/times.txt"
}

crosscheck() {
  local started=$SECONDS
  ${PYTHON:-python3} bench/gpu/gpu_crosscheck.py --out "$out/crosscheck" --steps ab --base half-gpu \
    --candidate half-gpu --base-python "$base_python" --preset "${PRESET:-llama-8b}" \
    --platform "${PLATFORM:-cuda}" --ab-repeat 8 --vb-repeat 3 --cache-dir "$cache" \
    ${XC_ARGS:-} 2>&1 | tee "$out/crosscheck.log"
  echo "crosscheck: exit ${PIPESTATUS[0]} after $((SECONDS - started)) s" | tee -a "$out/times.txt"
}

for step in ${*:-gate crosscheck}; do
  case $step in
  gate) gate ;;
  crosscheck) crosscheck ;;
  esac
done
tail -c 20000 "$cache"/logs/*.log > "$out/server-logs.txt" 2>/dev/null
exit 0
