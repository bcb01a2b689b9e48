#!/bin/bash
# One command run with BURNERS CPU-bound processes beside it (default 2): how a result
# holds on a loaded machine. Its output (stdout and stderr) and its exit status, seconds
# and load average go to OUT; the burners end with it, also on Ctrl-C.
# Usage, from the repository root after `make setup`:
#   [BURNERS=2] OUT=FILE bash bench/beside_burners.sh COMMAND [ARG...]
set -u
BURNERS=${BURNERS:-2}
: "${OUT:?OUT=FILE names where the output goes}"
[ $# -gt 0 ] || { echo "usage: [BURNERS=2] OUT=FILE bash bench/beside_burners.sh COMMAND [ARG...]" >&2; exit 2; }
pids=()
for _ in $(seq 1 "$BURNERS"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
echo "commit $(git rev-parse --short HEAD 2>/dev/null), $BURNERS CPU burner(s), $(nproc) cores: $*" > "$OUT"
start=$(date +%s)
"$@" >> "$OUT" 2>&1
rc=$?
echo "exit $rc after $(( $(date +%s) - start )) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT"
exit "$rc"
