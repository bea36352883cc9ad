"""``python -m tests.fuse.small_namespace_mount ARGS``: the real mount daemon (``python -m
fuse_adapter ARGS``, the same ``main``) with a version mount's namespace cache lowered from
64 MiB (``paged_tree.PAGE_BUDGET``) to ``BUDGET`` bytes: one directory page at a time, so
every listing and lookup of another directory drops the page a reader is in the middle of
(tests/fuse/test_review26_namespace.py)."""

from __future__ import annotations

from fuse_adapter import layout
from fuse_adapter.__main__ import exit_now, main

BUDGET = 1

if __name__ == "__main__":
    assert layout.version_view.__kwdefaults__ is not None
    layout.version_view.__kwdefaults__["namespace_bytes"] = BUDGET
    exit_now(main())
