# Two entry points: `make demo` (the main job) and `make test` (what CI runs).
# Both create .venv (reusing packages already installed system-wide) and install the project.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -m pip install -q -e ".[all,test]"
	.ci/install-browser
	touch $@

demo: install
	$(BIN)/mintransformer demo

lint: install
	$(BIN)/python -m ruff check src tests benchmarks
	$(BIN)/python -m ruff format --check src tests benchmarks

# Everything on the default backend (TensorFlow), the core tests on JAX and PyTorch too.
# The TensorFlow run lists its 25 slowest tests: where the suite's time goes.
test: lint
	KERAS_BACKEND=tensorflow $(BIN)/python -m pytest -q -p no:cacheprovider --durations=25
	KERAS_BACKEND=jax $(BIN)/python -m pytest -q -p no:cacheprovider -m core
	KERAS_BACKEND=torch $(BIN)/python -m pytest -q -p no:cacheprovider -m core
