"""Is a process (named by a PID recorded in a file or an index) still alive?

Cache processes, mount daemons and the CSI plugin all leave PIDs behind and must tell a
live holder from a dead one after a crash; this is the one answer they share.
"""

from __future__ import annotations

import contextlib
import os


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs (owned by anyone); a zombie counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, just not ours
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True
