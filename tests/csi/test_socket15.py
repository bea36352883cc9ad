"""The plugin's gRPC socket is its owner's alone, whatever the umask (leftovers15).

Whoever can connect to the socket can call NodePublishVolume with any pod's identity in
``volume_context``. gRPC created the socket with the mode the process umask left: under umask
0 any local user could connect. Now it is 0600 (``csi.server.SOCKET_MODE``), made so before
its path exists. Checked as the CO does: the plugin as a real subprocess started under umask
0; root (the kubelet, the registrar, the livenessprobe sidecar) calls over the socket; a
process as ``nobody`` can reach the path but not connect.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi.__main__ import DRIVER_NAME
from csi.proto_gen import csi_pb2 as pb
from tests.csi.conftest import NODE_ID, CsiEnv, Plugin

# run as nobody by the system python (it needs nothing of ours): stat the socket's path, then
# connect to it; prints what each step gave
_AS_NOBODY = """
import os, socket, sys
path = sys.argv[1]
print("stat", "ok" if os.path.exists(path) else "missing")
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
    print("connect ok")
except OSError as exc:
    print("connect", exc.errno)
"""


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory every user may enter (pytest's own are root's alone): a refused connect then
    comes from the socket's mode, not from a directory on its path."""
    root = Path(tempfile.mkdtemp(prefix="csi-socket15-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def as_nobody(path: Path) -> list[str]:
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3"]
    done = subprocess.run([*cmd, "-c", _AS_NOBODY, str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_socket_is_owner_only_under_umask_0(csi_env: CsiEnv, open_root: Path) -> None:
    stale = socket.socket(socket.AF_UNIX)  # a socket left by a previous run, anyone's (0777)
    stale.bind(str(open_root / "csi.sock"))
    stale.close()
    os.chmod(open_root / "csi.sock", 0o777)
    # the control: nobody's connect gets past the permission check to the (dead) socket
    assert as_nobody(open_root / "csi.sock") == ["stat ok", f"connect {errno.ECONNREFUSED}"]
    plugin = Plugin(open_root, csi_env.config_path, umask=0)
    try:
        plugin.start()
        # another user reaches the path (the directories let it) but may not connect
        assert as_nobody(plugin.socket) == ["stat ok", f"connect {errno.EACCES}"]
        st = os.stat(plugin.socket)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
        # the registrar's and the livenessprobe's calls, and the kubelet's NodeGetInfo, as root
        assert plugin.identity.Probe(pb.ProbeRequest(), timeout=10).ready.value
        assert plugin.identity.GetPluginInfo(pb.GetPluginInfoRequest(), timeout=10).name == DRIVER_NAME
        assert plugin.node.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10).node_id == NODE_ID
        # the private directory the socket was bound in is gone
        assert sorted(p.name for p in open_root.iterdir()) == ["csi.sock", "plugin.log", "state"]
    finally:
        plugin.teardown()


def test_socket_directory_it_makes_is_not_writable_by_others(csi_env: CsiEnv, open_root: Path) -> None:
    """Whoever may write a directory on the socket's path may put their own socket there (and
    receive the kubelet's calls, secrets included): made under umask 0, they were 0777."""
    plugin = Plugin(open_root, csi_env.config_path, umask=0)
    plugin.socket = open_root / "plugins" / "csi.datahub.dev" / "csi.sock"
    try:
        plugin.start()
        for made in (plugin.socket.parent, plugin.socket.parent.parent):
            assert stat.S_IMODE(os.stat(made).st_mode) == 0o755, made
        assert stat.S_IMODE(os.stat(plugin.socket).st_mode) == 0o600
    finally:
        plugin.teardown()


def test_an_existing_loose_socket_directory_is_tightened_or_refused(open_root: Path) -> None:
    """sec25: a socket directory that already existed was taken as it was. In a 0777 one (a
    controller pod's ``emptyDir``) another user renamed the plugin's socket away and bound
    their own at the endpoint, receiving the kubelet's calls. Now the plugin makes its own
    directory 0755 before it binds, and refuses to serve below a directory it does not own
    that others may write (a rename of that directory moves the socket away just as well)."""
    import threading

    from csi.server import serve
    from datahub.errors import InvalidInput

    loose = open_root / "csi"
    loose.mkdir()
    loose.chmod(0o777)
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            serve(f"unix://{loose}/csi.sock", name=DRIVER_NAME, node=None, controller=None, stop=stop)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    served = threading.Thread(target=run)
    served.start()
    try:
        for _ in range(200):  # the socket appears once the server listens
            if (loose / "csi.sock").exists() or errors:
                break
            stop.wait(0.05)
        assert not errors, errors
        assert stat.S_IMODE(os.stat(loose).st_mode) == 0o755
        assert as_nobody(loose / "csi.sock") == ["stat ok", f"connect {errno.EACCES}"]
    finally:
        stop.set()
        served.join(30)
    # a loose directory above it, not sticky: refused before anything is bound, naming it
    inner = loose / "plugins"
    inner.mkdir(mode=0o755)
    loose.chmod(0o777)
    with pytest.raises(InvalidInput, match=f"CSI socket directory '{loose}' is writable by others"):
        serve(f"unix://{inner}/csi.sock", name=DRIVER_NAME, node=None, controller=None, stop=stop)
    assert not (inner / "csi.sock").exists()
