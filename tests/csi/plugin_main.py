"""``python -m tests.csi.plugin_main UMASK ARGS``: the CSI plugin (``python -m csi ARGS``) as a test starts it.

Why: ``Plugin.start`` (tests/csi/conftest.py) ran ``python -X faulthandler -m csi`` with its own
umask, a fresh interpreter per start (the plugin's imports: pydantic, datahub's config and
catalog, grpc), and tests/csi and tests/multihost start it well over a hundred times a run.
Started as this module it is a fork of the worker's pre-imported zygote (tests/zygote.py),
which cannot take ``-X`` options nor a ``umask`` from Popen; so this module does both before it
runs ``csi`` as ``python -m csi`` would: faulthandler on (what ``-X faulthandler`` does: a plugin
aborted by ``Plugin.stop`` writes its threads' stacks to its log; its mount processes do not
inherit it), and the umask (``-1``: the caller's). Run as a fresh interpreter
(``DATAHUB_TEST_ZYGOTE=0``) it does the same.
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m tests.csi.plugin_main UMASK [CSI-ARGS...]")
    umask, *args = sys.argv[1:]
    if int(umask) >= 0:
        os.umask(int(umask))
    faulthandler.enable()
    sys.argv = ["csi", *args]  # runpy puts the module's file name first, as ``python -m`` does
    runpy.run_module("csi", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
