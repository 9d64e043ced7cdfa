# Two entry points: `make demo` (the main job) and `make test` (what CI runs).
# Both create .venv (reusing packages already installed system-wide) and install the project:
# the demo only what it and the commands it suggests run (TensorFlow, plots, the server),
# the tests everything, and the browser the page's test drives.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_EXTRAS := tensorflow,viz,serve

.PHONY: install demo test lint browser

install: $(VENV)/.installed

$(VENV)/.demo-installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -m pip install -q -e ".[$(DEMO_EXTRAS)]"
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -m pip install -q -e ".[all,test]"
	touch $(VENV)/.demo-installed $@

demo: $(VENV)/.demo-installed
	$(BIN)/mintransformer demo

browser:
	.ci/install-browser

lint: install
	$(BIN)/python -m ruff check src tests benchmarks
	$(BIN)/python -m ruff format --check src tests benchmarks

# Everything on the default backend (TensorFlow), the core tests on JAX and PyTorch too.
# The TensorFlow run lists its 25 slowest tests: where the suite's time goes.
# Much of a test's time is single-threaded tracing and compiling, so two worker processes
# keep both cores busy; --dist loadscope keeps a module's tests (and its fixtures) in one.
# Modules are handed out in the order tests/conftest.py sorts them (the slow ones first), not
# xdist's (most tests first), which left a one-test module of minutes to run alone at the end.
# Most XLA programs the tests compile (all of JAX's, TensorFlow's decoding loops) run once on
# tiny shapes, so both runs ask LLVM for less optimisation: the same IEEE arithmetic, compiled
# sooner.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
QUICK_XLA := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true
test: lint browser
	KERAS_BACKEND=tensorflow XLA_FLAGS="$(QUICK_XLA)" $(BIN)/python -m pytest -q -p no:cacheprovider $(PARALLEL) --durations=25
	KERAS_BACKEND=jax XLA_FLAGS="$(QUICK_XLA)" $(BIN)/python -m pytest -q -p no:cacheprovider $(PARALLEL) -m core
	KERAS_BACKEND=torch $(BIN)/python -m pytest -q -p no:cacheprovider -m core
