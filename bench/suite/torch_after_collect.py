"""What ``import torch`` still costs a worker once the rest of the suite is collected: the
marginal CPU that collecting a test module importing torch at its top adds to every
pytest-xdist worker (each worker collects every module). Collects the suite in-process
(``--collect-only``), then times importing ``datahub.torch.datasets`` (torch and its own
imports) with the process's CPU clock. A steadier figure than the difference of two whole
collections on a loaded machine (collect21, docs/benchmarks.md).

    python -m bench.suite.torch_after_collect   # from the tree to measure, its .venv
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time

import pytest


def main() -> None:
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        code = pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", "tests"])
    collected = time.process_time() - start
    had = "torch" in sys.modules
    start = time.process_time()
    import datahub.torch.datasets  # noqa: F401 - the import is the measurement

    torch_cpu = time.process_time() - start
    load = os.getloadavg()[0]
    print(f"collection {collected:.2f} CPU-s (exit {code}), torch imported by it: {had}; "
          f"then import datahub.torch.datasets: {torch_cpu:.2f} CPU-s; load {load:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
