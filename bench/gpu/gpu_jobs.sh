#!/usr/bin/env bash
# Background GPU jobs that outlive one device command (a command may run 10 minutes,
# the jobs run longer), polled by later commands. From the repository root:
#   bench/gpu/gpu_jobs.sh start NAME GPUS -- CMD...   run CMD in the background on GPUS
#   bench/gpu/gpu_jobs.sh wait SECONDS                  until every job ends, or SECONDS pass,
#                                                   then collect (below)
#   bench/gpu/gpu_jobs.sh collect                       tar every job's folder into $OUT
# Every wait brings back what the jobs have written so far: once the machine
# was given back between two polls and a 70B run's files, written but not yet
# collected, were lost.
# Each job gets its own folder under ~/gpu-jobs/NAME (its log and $OUT) and its own
# vLLM compile cache (VLLM_CACHE_ROOT), so that two jobs never write one cache at once.
# It runs from its own copy of the working tree (~/gpu-jobs/NAME/src): each device
# command gets a fresh tree, and a carried folder replaces the one a job started in.
set -uo pipefail
jobs_dir=~/gpu-jobs
mkdir -p "$jobs_dir"
collect() { tar czf "$OUT/gpu-jobs.tgz" --exclude='./*/src' -C "$jobs_dir" .; }
case "$1" in
start)
  name=$2 gpus=$3
  shift 4
  dir=$jobs_dir/$name
  mkdir -p "$dir/out" "$dir/src"
  tar cf - --exclude=./.git --exclude=./.gpu-wheels --exclude=./.venv . | tar xf - -C "$dir/src"
  cd "$dir/src" || exit 1
  CUDA_VISIBLE_DEVICES=$gpus VLLM_CACHE_ROOT=~/vllm-cache-$name OUT=$dir/out \
    VLLM_PERF_CACHE=~/perf-cache-$name PYTHONPATH="$dir/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 \
    setsid nohup bash -c '"$@"; echo "exit $?" > "$0/rc"' "$dir" "$@" > "$dir/log" 2>&1 < /dev/null &
  echo "started $name on GPU $gpus: $*"
  ;;
wait)
  # a fresh machine (the last one went back between two polls) has no jobs: say so at
  # once rather than spend the whole wait on it (once cost 570 s of device time)
  if ! compgen -G "$jobs_dir/*/log" > /dev/null; then
    echo "no jobs under $jobs_dir: this is a fresh machine, the last one and its jobs are gone" >&2
    exit 3
  fi
  end=$((SECONDS + $2))
  while [ $SECONDS -lt $end ]; do
    running=0
    for dir in "$jobs_dir"/*/; do [ -f "$dir/rc" ] || running=1; done
    [ $running = 0 ] && break
    sleep 5
  done
  for dir in "$jobs_dir"/*/; do
    echo "== $(basename "$dir"): $(cat "$dir/rc" 2>/dev/null || echo running)"
    if [ -f "$dir/rc" ] && ! grep -q "exit 0" "$dir/rc"; then n=40; else n=4; fi
    tail -n $n "$dir/log" | cut -c1-300
  done
  nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
  if [ -n "${OUT:-}" ]; then collect; fi
  ;;
collect)
  collect && ls -la "$OUT"
  ;;
esac
