"""A benchmark probe, not project code: every full (gen-2) GC collection of each Python process
started with this directory on ``PYTHONPATH`` is logged, with its duration, to
``$GC_PROBE_DIR/<pid>.log`` (default ``/tmp/gc-probe``).

Why: a daemon's full collections are what ``gc.freeze()`` (fuse_adapter/daemon.py) removes,
and an ``@base`` daemon of older code does not count them itself. Used as

    PYTHONPATH=bench/mount/gc_probe GC_PROBE_DIR=/tmp/gcp .venv/bin/python bench/mount/warm_path.py ...

(the mount daemons inherit the environment, the other interpreter's too).
"""

import gc
import os
import sys
import time

_DIR = os.environ.get("GC_PROBE_DIR", "/tmp/gc-probe")
_started = [0.0]


def _log(phase: str, info: dict) -> None:
    if info.get("generation") != 2:
        return
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - _started[0]) * 1e3
    os.makedirs(_DIR, exist_ok=True)
    with open(os.path.join(_DIR, f"{os.getpid()}.log"), "a") as f:
        f.write(
            f"{time.time():.3f} gen2 {ms:.1f} ms collected {info.get('collected')} argv {' '.join(sys.argv[:3])}\n"
        )


gc.callbacks.append(_log)
