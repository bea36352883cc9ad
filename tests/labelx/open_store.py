"""What a process of tests/labelx/test_review13c.py runs: open one labelx.db at a signal.

Why a module of its own: a ``spawn`` child imports the module of its target first, and the
test module's imports (the LabelX app, the catalog, the test fixtures) cost 2.3 CPU-s a
child against 0.15 for ``labelx.store`` alone, four children a run; what each child does
is the same either way."""

from __future__ import annotations

from labelx.store import LabelStore


def open_at_signal(path: str, start, out) -> None:
    """Wait for ``start``, open (migrating if it is old) and close the store at ``path``; put
    "ok" or the error's type and message on ``out``."""
    start.wait(30)
    try:
        LabelStore(path).close()
        out.put("ok")
    except Exception as e:
        out.put(f"{type(e).__name__}: {e}")
