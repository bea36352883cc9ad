"""The second half of review19d's late-RELEASE flow, shared by the tests that set up its first
handle in different ways (``test_review19d_release.py``, ``test_release19_unwritten.py``)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

MiB = 1024**2


def rewrite_past_the_quota_after_a_release(path: Path, release: Callable[[], None]) -> None:
    """An O_TRUNC handle writes 1 MiB nobody acknowledges; then the first handle's RELEASE
    comes (``release``, e.g. its munmap); then the rewrite grows past a 4 MiB quota, so its
    writes and its close fail with ENOSPC and the file goes back "to its last fsync or close",
    which the caller checks is still the acknowledged content."""
    w = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        assert os.pwrite(w, os.urandom(MiB), 0) == MiB  # not acknowledged
        release()
        with pytest.raises(OSError) as failed:
            for at in range(MiB, 8 * MiB, MiB):
                os.pwrite(w, os.urandom(MiB), at)
        assert failed.value.errno == errno.ENOSPC
    finally:
        with pytest.raises(OSError) as refused:
            os.close(w)  # goes back to its last fsync or close
    assert refused.value.errno == errno.ENOSPC
