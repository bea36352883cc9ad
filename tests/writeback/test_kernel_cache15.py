"""writes15: the view's rule for a WRITE past the quota from the kernel's write-back cache
(``--writeback-cache``, ``WorkspaceView._short_file``). The kernel sends a file's dirty pages
on any of its writable handles and, if a WRITE is refused, returns the error at the close
without a FLUSH; so the WRITE is answered as done with its bytes dropped, every writable
handle of the file is refused at its close (which reverts the file first), and a reader is
not. A WRITE not from the cache (``cached=False``: ``O_DIRECT``) fails as on the daemon path.
The real-mount side is tests/fuse/test_workspace_nospace.py's ``writeback-cache`` case and
tests/fuse/test_review15wb.py's ``O_DIRECT`` one."""

from __future__ import annotations

import os

import pytest

from datahub.errors import NoSpace
from fuse_adapter.quota import Quota
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import Env
from tests.writeback.test_review13c import _acked, _content


def test_a_cached_write_past_the_quota_is_answered_and_every_writer_refused_at_close(env: Env) -> None:
    view = WorkspaceView(env.open(), quota=Quota(64))
    view.kernel_cache_on()
    ino = _acked(view)  # "f" holds b"acked", acknowledged
    a, _, _ = view.open(ino, truncate=False)
    b, _, _ = view.open(ino, truncate=False)
    reader, _, _ = view.open(ino, truncate=False, writable=False)
    view.write(b, 0, b"within", cached=True)  # the kernel's WRITE for a's pages may come on b's handle
    assert view.write(b, 0, os.urandom(100), cached=True) == 100  # past the quota: answered, dropped
    with pytest.raises(NoSpace):
        view.fsync(a)  # an fsync is refused (and reverts nothing)
    for fh in (a, b):
        with pytest.raises(NoSpace):
            view.flush(fh)  # refused, the file back to what its close acknowledged
        assert _content(view.ws, "f") == b"acked"
    view.flush(reader)  # a reader's close is not refused
    for fh in (a, b, reader):
        view.release(fh)
    assert _content(view.ws, "f") == b"acked"
    assert view.quota is not None and view.quota.used == 5
    view.ws.close()


@pytest.mark.parametrize("cache", [False, True], ids=["daemon path", "direct WRITE, cache on"])
def test_a_write_not_from_the_cache_fails_itself_and_changes_no_byte(env: Env, cache: bool) -> None:
    """The daemon path as before, and with the cache on a WRITE not from it (``cached``
    False: ``O_DIRECT``, the caller's ``write(2)`` waiting for it): refused with ENOSPC there,
    no byte of it written (the quota is charged first). Before (review15wb), with the cache
    on, it was answered as done and its bytes dropped."""
    view = WorkspaceView(env.open(), quota=Quota(64))
    if cache:
        view.kernel_cache_on()
    ino = _acked(view)
    a, _, _ = view.open(ino, truncate=False)
    with pytest.raises(NoSpace):
        view.write(a, 0, os.urandom(100))
    assert view.read(a, 0, 100) == b"acked"
    view.release(a)
    view.ws.close()
