"""review26: a read-only publish of a writable stage is bound read-only, and stays so when the
plugin and the stage's mount process are killed and the plugin restarts (issue 38 review).

Driven over the plugin's gRPC socket as the kubelet would (tests/csi/conftest.py). The bind
of a target is a mount of its own whose per-mount flags (``ro``, and the FUSE mount's
``nosuid``, ``nodev``: a pod must not run a set-uid file its workspace holds) are what the
pod gets; a repair binds a new one, which must carry the same flags."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Mode, Plugin, wait_until
from tests.csi.test_stage import code_of

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


def _options(path: str) -> set[str]:
    """The per-mount options of the top mount at ``path`` (a FUSE view)."""
    found = None
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if fields[4] == path:
                found = set(fields[5].split(",")), fields[fields.index("-") + 1]
    assert found is not None, f"nothing mounted at {path}"
    assert found[1].startswith("fuse"), found
    return found[0]


def _write_errno(path: str) -> int:
    with pytest.raises(OSError) as exc:
        Path(path, "x.txt").write_bytes(b"x")
    return exc.value.errno


def _gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def test_a_read_only_target_of_a_writable_stage_is_bound_read_only_again_after_a_restart(
    csi_env: CsiEnv, tmp_path: Path
) -> None:
    plugin = Plugin(tmp_path, csi_env.config_path, check_interval=3600).start()  # the start-up pass only
    staging = tmp_path / "plugins" / "ws" / "globalmount"
    staging.mkdir(parents=True)
    target = tmp_path / "pods" / "reader" / "mount"
    target.parent.mkdir(parents=True)
    context = {"workspace": "review26-restart"}
    try:
        plugin.stage(str(staging), context, volume_id="r26", mode=Mode.SINGLE_NODE_WRITER)
        (staging / "seed.txt").write_bytes(b"seed\n")  # the stage is writable: close() acknowledged it
        plugin.publish(str(target), context, volume_id="r26", staging=str(staging), readonly=True)
        assert {"ro", "nosuid", "nodev"} <= _options(str(target))
        assert _write_errno(str(target)) == errno.EROFS
        assert (target / "seed.txt").read_bytes() == b"seed\n"

        [daemon] = [p["pid"] for p in plugin.state() if p.get("staged")]
        plugin.kill9()
        os.kill(daemon, signal.SIGKILL)
        wait_until(lambda: _gone(daemon), 30, "the stage's mount process gone")
        with pytest.raises(OSError):  # ENOTCONN: the dead view is still on the target
            os.listdir(target)
        again = Plugin(tmp_path, csi_env.config_path, check_interval=3600).start()  # ready after its check
        plugin.proc, plugin.channel = again.proc, again.channel

        assert (target / "seed.txt").read_bytes() == b"seed\n"
        assert {"ro", "nosuid", "nodev"} <= _options(str(target))
        assert _write_errno(str(target)) == errno.EROFS
        (staging / "more.txt").write_bytes(b"more\n")  # the stage itself: writable as it was staged
        assert (target / "more.txt").read_bytes() == b"more\n"
        code = code_of(lambda: again.publish(str(target), context, volume_id="r26", staging=str(staging)))
        assert code == grpc.StatusCode.ALREADY_EXISTS  # read-write now: another request
    finally:
        plugin.teardown()
