#!/usr/bin/env bash
# The README's first perf test as a new user runs it on the CPU engine: its Python block
# and its pytest.ini block copied from the README into an empty folder, then run as the
# README says: once saving the baseline, once unchanged against it, and once with a
# planted profiles/default.yaml (max_num_seqs: 1). Prints each run's summary.
#   bash bench/readme_first_test.sh > bench/results/cpu/readme-first-test.txt 2>&1
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$repo/.venv/bin/python" - "$repo/README.md" "$work" <<'PY'
import re, sys
from pathlib import Path
text, work = Path(sys.argv[1]).read_text(), Path(sys.argv[2])
[test] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("# test_first.py")]
[ini] = [b for b in re.findall(r"```ini\n(.*?)```", text, re.S) if b.startswith("# pytest.ini")]
(work / "test_first.py").write_text(test)
(work / "pytest.ini").write_text(ini)
PY
cd "$work"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $(nproc) cores; $(date -u +%FT%TZ)"
echo "# pytest.ini:"; cat pytest.ini
run() {
  echo; echo "## pytest test_first.py $*"
  status=0
  "$repo/.venv/bin/pytest" test_first.py -p no:cacheprovider "$@" > run.log 2>&1 || status=$?
  sed -n '/vLLM perf summary/,$p' run.log | grep -v '^what each test cost' ; echo "exit $status"
}
run --vllm-save-baseline
run
mkdir -p profiles
printf 'description: planted\nengine: {max_num_seqs: 1}\n' > profiles/default.yaml
echo; echo "# planted: profiles/default.yaml sets max_num_seqs: 1"
run
