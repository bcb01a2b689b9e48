#!/bin/bash
# CI's run on a fresh clone of HEAD, as .ci/run runs it (make setup, then make test with
# .ci/run's arguments), with bench/ci_timeline.py recording when each worker's files
# ended. To OUT (default bench/results/cpu/ci-timeline.txt): the commit, the run's
# seconds and pytest's last line, then each worker's chain of files.
# Usage, from the repository root:  [OUT=FILE] [TEST_WORKERS=N] bash bench/ci_timeline.sh
set -u
OUT=${OUT:-bench/results/cpu/ci-timeline.txt}
here=$(pwd)
case $OUT in /*) ;; *) OUT=$here/$OUT ;; esac
clone=$(mktemp -d /tmp/ci-timeline-XXXX)
git clone -q "$here" "$clone/repo" || exit 1
cd "$clone/repo" || exit 1
start=$(date +%s)
CI=true make setup > "$clone/setup.log" 2>&1 || { echo "make setup failed: $clone/setup.log" >&2; exit 1; }
setup_s=$(( $(date +%s) - start ))
CI=true CI_TIMELINE_OUT="$clone/timeline.txt" PYTHONPATH="$clone/repo" \
  make test ARGS="-p no:cacheprovider -rA --durations=40 -p bench.ci_timeline" > "$clone/test.log" 2>&1
rc=$?
{
  echo "commit $(git rev-parse --short HEAD), $(nproc) cores: make setup && make test TEST_WORKERS=${TEST_WORKERS:-4} (.ci/run's arguments, -p bench.ci_timeline)"
  echo "exit $rc after $(( $(date +%s) - start )) s in all, make setup $setup_s s; $(grep -E '^=+ .*(passed|failed).* in ' "$clone/test.log" | tail -1)"
  echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg); logs in $clone"
  .venv/bin/python bench/ci_timeline.py "$clone/timeline.txt"
} > "$OUT"
exit $rc
