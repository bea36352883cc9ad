"""Serving a mount: mount it, run its request loop (trio) until it is unmounted or a stop
signal arrives, then unmount cleanly, with the mount's start-up and shutdown work around it.

The requests themselves are ``fuse_ops``' (the protocol shim and the C layer's only Python
caller); this module drives the session through its four calls (``mount``,
``run_requests``, ``terminate``, ``unmount``) and never touches pyfuse3 itself.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable

import trio

from fuse_adapter import fuse_ops
from fuse_adapter.fuse_ops import Ops
from fuse_adapter.mount_sys import set_readahead, single_leaf, sync_mount

log = logging.getLogger(__name__)


async def _write_back(mountpoint: str) -> None:
    """The page cache's dirty pages to the daemon before it stops serving (``sync_mount``),
    so its stop closes holders' files with every byte they wrote; at most a minute, then
    the stop goes on (a daemon that cannot take WRITEs has nothing better to do)."""
    with trio.move_on_after(60):
        try:
            await trio.to_thread.run_sync(sync_mount, mountpoint, abandon_on_cancel=True)
        except OSError as exc:
            log.warning("writing back the page cache of %s before stopping: %s", mountpoint, exc)


async def _outlast_attributes(deadline: float) -> None:
    """Keep the connection until the attributes the kernel holds have expired (the mount's
    attribute timeout after the last request answered), before the unmount ends it.

    Why: with the kernel's write-back cache a holder's ``write(2)`` goes to the page cache
    without a request while the file's attributes are fresh; on a connection already ended
    it then succeeded, its bytes never to be committed. Expired, the write asks for them
    first (nobody answers now) and gets ENOTCONN once the unmount ends the connection, as
    docs/fuse.md says. ``datahub umount`` used to take longer than the timeout by itself (it
    reopened the workspace); since unpublish15 it does not, so the daemon waits, at most the
    timeout (1 s) less its flush and commit, and only on ``--writeback-cache`` mounts.
    """
    with trio.CancelScope(shield=True):
        await trio.sleep_until(deadline)


def serve(
    ops: Ops,
    mountpoint: str,
    options: set[str],
    *,
    on_ready: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    readahead_kib: int = 0,
    max_tasks: int = 64,
) -> None:
    """Mount, serve until unmounted or SIGTERM/SIGINT, then unmount cleanly. Blocks.

    ``on_ready`` runs once the mount is live; ``on_stop`` (blocking, e.g. a workspace
    flush) runs in a worker thread after requests stop and before the unmount completes.
    """

    async def main() -> None:
        # the receiver exists before the mount does: a signal sent as soon as the mount
        # appears is queued for watch_signals instead of killing the process mid-mount
        stops = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
        with trio.open_signal_receiver(*stops) as sigs:
            # blocked while libfuse mounts: the mount is visible before init returns, and a
            # stop signal then interrupted libfuse's waitpid ("fuse: waitpid: Interrupted
            # system call"), failed the init and was re-raised as KeyboardInterrupt (exit
            # 130, the mount left behind). Unblocked, it reaches the receiver.
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            try:
                fuse_ops.mount(ops, mountpoint, options)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            await _serve_mounted(sigs)

    async def _serve_mounted(sigs: AsyncIterator[int]) -> None:
        unmounted = False
        try:
            async with trio.open_nursery() as nursery:

                async def watch_signals() -> None:
                    async for sig in sigs:
                        log.info("signal %d: unmounting %s", sig, mountpoint)
                        if getattr(ops, "enable_writeback_cache", False):
                            await _write_back(mountpoint)
                        fuse_ops.terminate()
                        return

                async def after_mount() -> None:
                    if readahead_kib:
                        # after INIT: its reply would clamp the readahead back to the default
                        await ops.initialized.wait()
                        set_readahead(mountpoint, readahead_kib)
                    if on_ready is not None:  # in a thread: it may touch the file system
                        await trio.to_thread.run_sync(on_ready, abandon_on_cancel=True)

                nursery.start_soon(watch_signals)
                nursery.start_soon(after_mount)
                await fuse_ops.run_requests(ops, max_tasks)
                unmounted = True
                nursery.cancel_scope.cancel()
        finally:
            served_until = trio.current_time()  # no request is answered from here on
            try:
                if on_stop is not None:  # a failed flush must still unmount, and then be reported
                    await trio.to_thread.run_sync(on_stop)
            finally:
                if getattr(ops, "enable_writeback_cache", False):
                    await _outlast_attributes(served_until + getattr(ops, "timeout", 0.0))
                fuse_ops.unmount()
                log.info("%s %s", "unmounted" if unmounted else "stopped", mountpoint)

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        # one failure inside the nursery (e.g. on_ready could not write the mount record)
        # reaches the caller as itself, so the CLI reports it as an error, not a traceback
        only = single_leaf(group)
        if only is None:
            raise
        raise only from None
