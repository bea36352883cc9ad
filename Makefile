# The two commands: `make run` and `make test` (see README.md). Both install what is missing first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install run test lint unit bench clean

install:
	@scripts/install.sh

run: install
	$(PY) -m datahub.demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: install lint
	$(PY) -m pytest -q

unit: install
	$(PY) -m pytest -q -m "not ceph and not fuse and not browser"

bench: install
	@echo "see bench/README.md"

clean:
	rm -rf var .pytest_cache
