"""``python -m tests.fuse.fsize_mount ARGS``: the real mount daemon (``python -m fuse_adapter
ARGS``, the same ``main``) under an ``RLIMIT_FSIZE`` of ``LIMIT`` bytes.

Why: a WRITE answered in C (fastwrite.h) fails only when ``pwrite`` to the staged file does,
and inside a staged file's reservation that is not for space. A file size limit makes it
fail, for any file the daemon writes past ``LIMIT``: with EFBIG, Python ignoring SIGXFSZ.
The other files the daemon writes in the tests that use it (the journal, chunks of files
under ``LIMIT``) stay below it.
"""

from __future__ import annotations

import resource
import signal

from fuse_adapter.__main__ import exit_now, main

LIMIT = 6 * 1024**2 + 512 * 1024  # a 1 MiB write(2) at 6 MiB fails half done

if __name__ == "__main__":
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN  # as CPython sets it at start-up
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
    exit_now(main())
