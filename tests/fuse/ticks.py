"""A read-only mount's tick (``cache.read_mode_tick_seconds``, 1 s by default) and its read
mode's drain window (``cache.read_mode_drain_seconds``, 5 s), shortened for the tests that
wait on them.

Why: the automatic read mode decides on a row of warm ticks, the sweep of page files another
process evicted goes round its table a slice a tick, and a switch held by open passthrough
handles is given up only once the window is over; at the defaults such a test sat out whole
seconds doing nothing. Shorter ticks keep every behaviour (the decision asks for the same
opens, the sweep for the same slices, the held switch still waits, then gives up)."""

from __future__ import annotations

from tests.fuse.conftest import FuseEnv

#: seconds per tick in these tests: the stats snapshot's period (conftest.MAINTAIN_INTERVAL)
TICK = 0.2
#: seconds a switch waits for held passthrough handles: several ticks and polls, so a test
#: sees the first give-up long before a third (after MAX_ABORTS the mount stays in passthrough)
DRAIN = 1.5


def short_ticks(env: FuseEnv, tick: float = TICK, drain: float = DRAIN) -> FuseEnv:
    """Set ``env``'s mounts' tick and drain window (its config file's ``[cache]`` section is
    the file's last: ``conftest.make_env``); returns ``env``."""
    with open(env.config_path, "a") as fh:
        fh.write(f"read_mode_tick_seconds = {tick}\nread_mode_drain_seconds = {drain}\n")
    return env
