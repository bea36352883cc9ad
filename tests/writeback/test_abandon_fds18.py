"""``Workspace.abandon`` (what a crash leaves; the test fixtures' and a failed mount start's way
out) lets go of every descriptor the workspace opened: its owner lock, its LMDB journal, the
pack files it wrote and read, its flush server's socket, files left open. Counted in
``/proc/self/fd`` before the open and after the abandon (leftovers18: checked, none leaked;
this keeps it so)."""

from __future__ import annotations

import os

from tests.writeback.conftest import write


def _fds() -> dict[str, str]:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


def test_abandon_closes_every_descriptor_the_workspace_opened(env, catalog) -> None:
    before = _fds()
    ws = env.open(lease=catalog.store)  # background: flusher, flush server, lease renewal
    ws.mkdir("d")
    for i in range(6):
        write(ws, f"d/f{i}", bytes([i]) * 9000)  # chunks into packs (or chunk files)
    ws.flush()
    for i in range(6):  # read back from the shared tier: the pack files are opened for reading
        with ws.open(f"d/f{i}") as fh:
            assert fh.read(0, 9000) == bytes([i]) * 9000
    write(ws, "dirty", b"x" * 5000)  # acknowledged, not flushed
    held = ws.open("held", create=True, truncate=True)  # left open, as by a crashed writer
    held.write(0, b"y" * 300_000)
    during = _fds()
    assert any("/lmdb/" in path for path in during.values()), during  # what is counted is there
    ws.abandon()
    leaked = {fd: path for fd, path in _fds().items() if before.get(fd) != path}
    assert leaked == {}, leaked
    # and the journal opens again, with what was acknowledged
    again = env.open(background=False)
    assert again.stat("dirty").size == 5000 and "dirty" in again.dirty()
    again.close()
