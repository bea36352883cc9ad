"""Whether a read-only mount takes its requests from FUSE over io_uring, and why not.

Through /dev/fuse every request wakes the one thread that reads the device, wherever it
last ran, and its answer wakes the reader back. On a VM whose idle vCPUs halt, those two
cross-CPU wake-ups cost more than the answer itself. FUSE over io_uring (Linux >= 6.14)
gives each CPU a queue; pyfuse3's ``uring.h`` (datahub's build) serves each with a C thread
pinned to that CPU, so a reader's request is answered on its own CPU (docs/fuse.md,
"Requests over io_uring").

The kernel offers it at INIT only while the module parameter ``fuse.enable_uring`` is on.
That parameter is an offer, not a switch: a FUSE server that does not ask at INIT keeps
/dev/fuse. So a daemon that may (root) turns it on, logged; otherwise the mount keeps
/dev/fuse and says why once.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fuse_adapter.fast_path import FastPath

log = logging.getLogger(__name__)

#: the module parameter; DATAHUB_FUSE_URING_PARAM names another file (tests: a parameter
#: that reads on while the kernel's is off, to see the mount fall back at INIT)
PARAM = Path("/sys/module/fuse/parameters/enable_uring")
DISABLED_SYSCTL = Path("/proc/sys/kernel/io_uring_disabled")


def _param() -> Path:
    return Path(os.environ.get("DATAHUB_FUSE_URING_PARAM") or PARAM)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def kernel_offer(*, enable: bool = True) -> str | None:
    """None if the kernel will offer FUSE over io_uring to the next mount, else why not.

    With ``enable`` (the default) a parameter that is off is turned on when this process
    may write it (root)."""
    disabled = _read(DISABLED_SYSCTL)
    if disabled is not None and disabled != "0" and (disabled == "2" or os.geteuid() != 0):
        return f"io_uring is disabled for this process (kernel.io_uring_disabled = {disabled})"
    param = _param()
    value = _read(param)
    if value is None:
        return "the kernel has no FUSE over io_uring (Linux >= 6.14 with CONFIG_FUSE_IO_URING)"
    if value in ("Y", "1"):
        return None
    if not enable:
        return f"{param} is off"
    try:
        param.write_text("Y")
    except OSError as exc:
        return f"{param} is off and could not be turned on ({exc.strerror}; needs root)"
    log.info("turned on %s: the kernel now offers FUSE over io_uring to servers that ask", param)
    return None


def mount_transport(wanted: bool, fastloop: bool) -> tuple[bool, str]:
    """(use io_uring, what the mount's log and stats say) for a read-only mount."""
    if not wanted:
        return False, "/dev/fuse (--no-io-uring)"
    if not fastloop:
        return False, "/dev/fuse (io_uring needs pyfuse3's C loop thread; --no-fastloop or an older build)"
    why = kernel_offer()
    if why is not None:
        log.info("requests: /dev/fuse, not io_uring: %s", why)
        return False, f"/dev/fuse ({why})"
    return True, "io_uring (one queue per CPU)"


def transport_stats(c_stats: dict, fast: FastPath) -> dict:
    """What a mount's stats say of its requests: where they come from (io_uring queues, or
    /dev/fuse and why) and the counts of pyfuse3's C threads (``c_stats``: its
    ``passthrough_stats()``, empty for a build without io_uring). The C loop's own counts are
    here too, in every read mode: ``passthrough.stats()`` has them only while passthrough is
    wanted, so a ``--no-passthrough`` mount, whose C threads answer its ioctls and READs all
    the same, showed ``fastloop`` false and no ioctl (warm36)."""
    queues = c_stats.get("uring_queues", 0)
    if queues:
        requests = f"io_uring ({queues} queues)"
    elif fast.io_uring:
        requests = "/dev/fuse (the kernel did not take io_uring at INIT)"
    else:
        requests = fast.transport
    out = {
        "requests": requests,
        "io_uring_queues": queues,
        "io_uring_requests": c_stats.get("uring_requests", 0),
        "io_uring_answered_in_c": c_stats.get("uring_answered", 0),
        "io_uring_handed_to_python": c_stats.get("uring_handed", 0),
        "lookups_answered_in_c": c_stats.get("lookup_answered", 0),
        "lookup_names_in_c": c_stats.get("lookup_names", 0),
    }
    if c_stats:
        out.update(
            fastloop=bool(c_stats.get("fastloop", False)),
            ioctls_in_loop_thread=c_stats.get("loop_ioctls", 0),
            forgets_in_loop_thread=c_stats.get("loop_forgets", 0),
            # every request a C thread (the /dev/fuse one, an io_uring queue's) handed to the
            # Python loop: a warm pass that never enters Python leaves it where it was
            requests_handed_to_python=c_stats.get("loop_handed", 0) + c_stats.get("uring_handed", 0),
        )
    return out
