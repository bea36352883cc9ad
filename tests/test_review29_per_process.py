"""``procs.PerProcess`` read by one thread while another drops its value (review29).

A ``get`` read the owning PID and the value as two attributes. A store's ``close`` in another
thread (``drop``) between the two reads made that ``get`` answer None, and its caller failed
with "'NoneType' object has no attribute …" instead of the closed store's own error (or
its last good value)."""

from __future__ import annotations

import os
import types

import pytest

from datahub import procs
from datahub.procs import PerProcess


def test_a_get_that_meets_a_drop_answers_a_value_never_none(monkeypatch: pytest.MonkeyPatch) -> None:
    values: PerProcess[object] = PerProcess(object)
    first = values.get()
    dropped: list[object | None] = []
    calls = [0]

    def getpid() -> int:  # another thread's close() runs inside this get's first PID check
        calls[0] += 1
        if calls[0] == 1:
            dropped.append(values.drop())
        return os.getpid()

    monkeypatch.setattr(procs, "os", types.SimpleNamespace(getpid=getpid))
    got = values.get()
    assert dropped == [first]  # the drop ran inside that get
    assert got is first  # before: None (the PID read before the drop, the value after it)
    again = values.get()  # dropped: the next get makes another
    assert again is not None and again is not first and values.current() is again
