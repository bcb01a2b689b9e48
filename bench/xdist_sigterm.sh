#!/usr/bin/env bash
# A SIGTERM to the controller of `pytest -n 2` on the CPU engine, with both workers'
# servers serving a 600 s decode test: how long until no vLLM process of the run is left
# (serving/launch.py's watch of the process that started each server).
#   bash bench/xdist_sigterm.sh > bench/results/cpu/xdist-sigterm.txt
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap '[ -n "${groups:-}" ] && pkill -KILL -g "$groups"; rm -rf "$dir"' EXIT
for name in a b; do
  cat > "$dir/test_$name.py" <<TEST
import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=600, chat={"users": 2})
def test_$name(vllm_perf):
    vllm_perf.run()
TEST
done
cd "$dir"
"$repo/.venv/bin/pytest" -n 2 --dist loadfile -p no:cacheprovider > out.txt 2>&1 &
controller=$!
for _ in $(seq 1 200); do
  ready=$( (grep -l "Application startup complete" .vllm-perf-cache/logs/*.log 2>/dev/null || true) | wc -l)
  [ "$ready" = 2 ] && break
  sleep 1
done
sleep 5  # the load under way
# each server leads a process group of its own: its API server, engine core and workers
groups=$(pgrep -d, -f "serving.launch serve $dir" || true)
members() { (pgrep -g "$groups" || true) | wc -l; }
echo "servers serving: $ready; processes in their groups: $(members) (groups $groups)"
kill -TERM "$controller"
start=$(date +%s.%N)
while [ "$(members)" != 0 ] && [ "$(echo "$(date +%s.%N) - $start < 60" | bc)" = 1 ]; do sleep 0.25; done
left=$(members)
if [ "$left" = 0 ]; then
  echo "no process of the servers' groups left $(echo "$(date +%s.%N) - $start" | bc) s after the controller's SIGTERM"
else
  echo "$left processes of the servers' groups still running 60 s after the controller's SIGTERM"
fi
wait "$controller" || echo "pytest exit $?"
grep -h "that started this server is gone" .vllm-perf-cache/logs/*.log
