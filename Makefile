# The two commands: `make run` and `make test` (see README.md). Both install what is missing first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install run test lint lint-c sanitize unit bench clean

install:
	@scripts/install.sh

run: install
	$(PY) -m datahub.demo

lint: install lint-c
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# datahub's C (third_party/pyfuse3, the catalog's, a benchmark's) with -Wall -Wextra -Wconversion ... -Werror (scripts/lint_c.sh)
lint-c: install
	@scripts/lint_c.sh

# pyfuse3's C built with ASan + UBSan runs the C paths' real-mount tests (third_party/pyfuse3/README.md)
sanitize: install
	@scripts/sanitize.sh

# Two passes (docs/architecture.md, "Running the suite in parallel"): every test not marked
# `exclusive` on $(JOBS) pytest-xdist workers, each test file whole on one worker; then the
# `exclusive` ones (a sysctl, a module parameter) alone, by the ids the first pass listed.
# Both passes keep pytest's rewritten modules (`env -u PYTHONDONTWRITEBYTECODE`; this kind of
# machine sets it): the first pytest process rewrites the plugins' ~270 modules (schemathesis) and
# the workers and the second pass read them, and the second pass reads the test modules the
# workers rewrote, instead of every process rewriting them all again (docs/benchmarks.md, "Suite
# time, seventh stop"). Python and pytest recompile any source newer than its cache.
# Each pass writes its timeline (which test ran on which worker, when; bench/suite/timeline.py):
# `$(PY) -m bench.suite.timeline_report var/suite-timeline.jsonl` shows each worker's busy and
# idle time and the units of the tail. A failed run ends with each timeline's failure digest
# (the tests that began and never ended, the workers' internal errors): the end of the log is
# what a CI report keeps.
# Three workers on two cores: a worker waits for much of its time (Chromium, mount daemons,
# namespaced hosts, servers), and a third fills those waits. Same head, same clone, one run after
# the other on the quiet 2-core VM: 922.2 s with 2, 802.1 s with 3, every test passing both times
# (docs/benchmarks.md, "Round 4, stop 72").
JOBS ?= 3
EXCLUSIVE_LIST := var/exclusive-tests.txt
TIMELINE := var/suite-timeline
TEST_PY := env -u PYTHONDONTWRITEBYTECODE $(PY)
# The exclusive pass deletes no old temp tree at its exit (pytest keeps the last 2 sessions' and
# numbers them machine-wide): when another pytest session started during the parallel pass (a
# shared machine), the rule made the exclusive pass delete this run's own parallel tree, serially,
# after its tests. The next session deletes them, a parallel run's controller in the background
# (docs/architecture.md, "Running the suite in parallel").
EXCLUSIVE_KEEP := 1000000
test: install lint
	@rm -f $(EXCLUSIVE_LIST) $(TIMELINE).jsonl $(TIMELINE)-exclusive.jsonl; mkdir -p var; rc=0; set -x; \
	DATAHUB_SUITE_TIMELINE=$(TIMELINE).jsonl $(TEST_PY) -m pytest -q -p bench.suite.timeline -n $(JOBS) --dist loadfile \
	  -m "not exclusive" --exclusive-list $(EXCLUSIVE_LIST) || rc=$$?; \
	if [ -s $(EXCLUSIVE_LIST) ]; then DATAHUB_SUITE_TIMELINE=$(TIMELINE)-exclusive.jsonl \
	  $(TEST_PY) -m pytest -q -p bench.suite.timeline -o tmp_path_retention_count=$(EXCLUSIVE_KEEP) \
	  @$(EXCLUSIVE_LIST) || rc=$$?; fi; \
	if [ $$rc -ne 0 ]; then set +x; echo "== the failed run's digest (bench/suite/timeline_report.py --failure)"; \
	  for t in $(TIMELINE).jsonl $(TIMELINE)-exclusive.jsonl; do $(PY) -m bench.suite.timeline_report --failure $$t; done; fi; \
	exit $$rc

unit: install
	$(PY) -m pytest -q -m "not ceph and not fuse and not browser"

bench: install
	@echo "see bench/README.md"

clean:
	rm -rf var .pytest_cache

# --- container images (issue 40; docs/kubernetes.md, "Building the images") ---------------------
# Built with Debian's buildah (chroot isolation, vfs storage under var/images/) on a Debian 12 base
# made by debootstrap; no Docker engine, no registry. One build at a time (2-core machine).
.PHONY: image image-test image-clean
image:
	scripts/images/build.sh

# builds first (unchanged steps come from the layer cache), then runs both images from their own roots
image-test: install image
	DATAHUB_TEST_IMAGES=1 $(PY) -m pytest -q tests/images

image-clean:
	scripts/images/clean.sh
