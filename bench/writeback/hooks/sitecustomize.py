"""Measurement hooks for a mount daemon started by ``bench/writeback/close_breakdown.py``
(this directory first on its ``PYTHONPATH``; nothing else imports it).

``DH_BENCH_HOOK`` (comma-separated):
- ``noreserve``: staged files get no ``fallocate`` reservation (``staged.reserve`` answers
  yes without reserving). UNSAFE: a write that fails for space would go unseen and be
  committed torn (docs/writeback.md, "A full staging disk"); it measures what the
  reservation costs, a design not taken.
- ``buffered``: chunk files are written through the page cache (``chunks._write_direct``
  refuses, as on a file system without ``O_DIRECT``): a staged file's copy is all ``splice``,
  then the chunk's ``fsync`` writes it back (the copy before bigwrites20).
- ``times``: each staged file's fsync (every FLUSH) appends one line to ``DH_BENCH_TIMES``:
  the fsync's wall time, the part spent in the journal commit (``commit_file``), the sum and
  the longest of its chunk copies (``copy_in``, run in parallel), and of those the aligned
  ``pread`` + ``O_DIRECT`` writes and the chunk files' ``fsync``; each last close of a staged
  file (``StagedFile.closed``: the staged file is closed, its blocks freed) one line too.
"""

from __future__ import annotations

import os
import threading
import time

_hooks = set(filter(None, os.environ.get("DH_BENCH_HOOK", "").split(",")))

if _hooks:
    from datahub.writeback import chunks, commits, staged

    if "noreserve" in _hooks:
        staged.reserve = lambda fd, upto: True  # type: ignore[assignment]

    if "buffered" in _hooks:
        chunks._write_direct = lambda fd, length, take: 0  # type: ignore[assignment]

    if "times" in _hooks:
        _out = os.environ["DH_BENCH_TIMES"]
        _lock = threading.Lock()
        _local = threading.local()

        def _emit(line: str) -> None:
            with _lock, open(_out, "a") as f:
                f.write(line + "\n")

        def _acc(name: str, secs: float) -> None:
            box = getattr(_local, "box", None)
            if box is not None:
                with _lock:
                    box[name] = box.get(name, 0.0) + secs
                    box[name + "_max"] = max(box.get(name + "_max", 0.0), secs)

        def _timed(owner, attr: str, name: str) -> None:
            inner = getattr(owner, attr)

            def wrapper(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    _acc(name, time.perf_counter() - start)

            setattr(owner, attr, wrapper)

        # the copies run on the upload pool: hand each its fsync's box
        _submit = chunks.ChunkStore.copy_in

        def copy_in(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return _submit(self, *args, **kwargs)
            finally:
                _acc("copy", time.perf_counter() - start)

        chunks.ChunkStore.copy_in = copy_in  # type: ignore[method-assign]
        _timed(chunks, "_write_direct", "direct")
        _real_fsync = os.fsync

        def fsync(fd):
            start = time.perf_counter()
            try:
                return _real_fsync(fd)
            finally:
                _acc("chunk_fsync", time.perf_counter() - start)

        chunks.os = type("os_with_timed_fsync", (), {})  # only chunks.py's own os.fsync is timed
        for _name in dir(os):
            if not _name.startswith("__"):
                setattr(chunks.os, _name, getattr(os, _name))
        chunks.os.fsync = staticmethod(fsync)
        _timed(commits.FileCommitter, "commit_file", "commit")

        from datahub.writeback import uploads

        def _wrap_submit(cls) -> None:
            def submit_copy(self, *args, **kwargs):
                box = getattr(_local, "box", None)

                def run():
                    _local.box = box
                    try:
                        return self.chunks.copy_in(*args, **kwargs)
                    finally:
                        _local.box = None

                return self._pool.submit(run)

            cls.submit_copy = submit_copy

        for _cls in vars(uploads).values():
            if isinstance(_cls, type) and "submit_copy" in vars(_cls):
                _wrap_submit(_cls)

        _fsync = staged.StagedFile.fsync

        def staged_fsync(self, *args, **kwargs):
            _local.box = box = {}
            start = time.perf_counter()
            try:
                return _fsync(self, *args, **kwargs)
            finally:
                total = time.perf_counter() - start
                _local.box = None
                if box:
                    _emit(
                        "fsync " + " ".join(f"{k}={v * 1000:.2f}" for k, v in {"total": total, **box}.items())
                    )

        staged.StagedFile.fsync = staged_fsync  # type: ignore[method-assign]
        _closed = staged.StagedFile.closed

        def closed(self):
            start = time.perf_counter()
            try:
                return _closed(self)
            finally:
                _emit(f"closed total={(time.perf_counter() - start) * 1000:.2f}")

        staged.StagedFile.closed = closed  # type: ignore[method-assign]
