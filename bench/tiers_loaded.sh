#!/bin/bash
# The unit and plugin tiers run RUNS times in a row (default 10) with BURNERS CPU-bound
# processes beside them (default 1): whether any test depends on the machine's pace.
# Each run's exit status, seconds, load average and pytest's last line go to OUT
# (default bench/results/cpu/tiers-loaded.txt); its whole output to a scratch folder
# the file names.
# Usage, from the repository root after `make setup`:
#   [RUNS=10] [BURNERS=1] [OUT=FILE] bash bench/tiers_loaded.sh
set -u
RUNS=${RUNS:-10}
BURNERS=${BURNERS:-1}
OUT=${OUT:-bench/results/cpu/tiers-loaded.txt}
logs=$(mktemp -d /tmp/tiers-loaded-XXXX)
echo "commit $(git rev-parse --short HEAD), $RUNS runs, $BURNERS CPU burner(s), $(nproc) cores," \
  "logs in $logs" > "$OUT"
for i in $(seq 1 "$RUNS"); do
  # each run through beside_burners.sh, which starts the burners, times the run and
  # ends the burners with it; its log's last line is that script's, pytest's the one before
  start=$(date +%s)
  BURNERS=$BURNERS OUT="$logs/run$i.log" bash bench/beside_burners.sh \
    timeout 1500 .venv/bin/python -m pytest -q tests/unit tests/plugin -p no:cacheprovider -n 2
  rc=$?
  echo "run $i rc=$rc $(( $(date +%s) - start ))s load=$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$(tail -2 "$logs/run$i.log" | head -1)" >> "$OUT"
done
