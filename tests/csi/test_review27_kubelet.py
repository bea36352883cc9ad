"""review27: the node plugin mounts only under the kubelet's dir (``--kubelet-dir``).

NodePublishVolume bound a volume onto any absolute target and NodeStageVolume onto any
staging path: a caller of the socket could have a dataset (or a pod's writable workspace)
bound over a host directory such as ``/etc/cron.d``, and NodeUnpublishVolume of a host's
empty directory removed it. The kubelet names paths under its own root dir only, so the
plugin now refuses the rest with INVALID_ARGUMENT naming the path, after resolving ``..``
and symlinks in its parents (what the mount would follow). The tests' plugins pass this
session's base temp dir as their kubelet dir (tests/csi/conftest.py); the paths refused here
are made outside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi.node import NodeService
from datahub.config import load_config
from datahub.errors import InvalidInput
from tests.csi.conftest import CsiEnv, Mode, Plugin, handed_clean, mounts_under
from tests.csi.test_stage import staging_path

CONTEXT = {"dataset": "imgs", "version": "1"}


@pytest.fixture
def node(plugin: Plugin) -> Iterator[Plugin]:
    yield from handed_clean(plugin)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host directory outside the tests' kubelet dir (the session's base temp dir)."""
    path = Path(tempfile.mkdtemp(prefix="review27-host-"))
    assert Plugin.default_kubelet_dir is not None and not str(path).startswith(
        str(Plugin.default_kubelet_dir)
    )
    try:
        yield path
    finally:
        for point in mounts_under(path):  # only if a refusal failed: never remove through a mount
            subprocess.run(["umount", "-l", point], capture_output=True)
        if not mounts_under(path):
            shutil.rmtree(path, ignore_errors=True)


def _refused(call, path: str) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    details = err.value.details()
    assert path in details and "kubelet" in details, details
    return details


@pytest.mark.fuse
def test_a_target_outside_the_kubelet_dir_is_refused_and_nothing_is_mounted(
    node: Plugin, csi_env: CsiEnv, outside: Path
) -> None:
    (outside / "etc").mkdir()
    (outside / "etc" / "passwd").write_text("root:x:0:0\n")
    target = str(outside / "etc")
    _refused(lambda: node.publish(target, CONTEXT, volume_id="r27-out"), target)
    assert (outside / "etc" / "passwd").read_text() == "root:x:0:0\n"  # not hidden under a bind
    assert mounts_under(outside) == [] and [p for p in node.state() if p["volume_id"] == "r27-out"] == []


@pytest.mark.fuse
def test_dot_dot_and_a_symlinked_parent_cannot_leave_the_kubelet_dir(
    node: Plugin, csi_env: CsiEnv, outside: Path
) -> None:
    escape = csi_env.target("r27-dots")  # <kubelet>/.../pods/r27-dots/mount
    levels = len(Path(escape).relative_to("/").parts)
    dotted = escape + "/.." * levels + str(outside / "x")  # lexically inside, resolves to outside/x
    details = _refused(lambda: node.publish(dotted, CONTEXT, volume_id="r27-dots"), dotted)
    assert str(outside / "x") in details  # the path it resolves to is named too
    link = Path(csi_env.target("r27-link")).parent / "vol"
    link.symlink_to(outside)  # a parent of the target that is a link out of the kubelet dir
    target = str(link / "mount")
    _refused(lambda: node.publish(target, CONTEXT, volume_id="r27-link"), target)
    assert mounts_under(outside) == [] and os.listdir(outside) == []


@pytest.mark.fuse
def test_a_staging_path_outside_the_kubelet_dir_is_refused_at_stage_and_at_publish(
    node: Plugin, csi_env: CsiEnv, outside: Path
) -> None:
    staging = str(outside)
    _refused(
        lambda: node.stage(staging, CONTEXT, volume_id="r27-st", mode=Mode.SINGLE_NODE_READER_ONLY), staging
    )
    assert mounts_under(outside) == []
    target = csi_env.target("r27-st")
    _refused(
        lambda: node.publish(
            target, CONTEXT, volume_id="r27-st", staging=staging, mode=Mode.SINGLE_NODE_READER_ONLY
        ),
        staging,
    )
    # inside the kubelet dir the same stage and publish are served
    inside = staging_path(csi_env, "r27-st")
    node.stage(inside, CONTEXT, volume_id="r27-st", mode=Mode.SINGLE_NODE_READER_ONLY)
    node.publish(target, CONTEXT, volume_id="r27-st", staging=inside, mode=Mode.SINGLE_NODE_READER_ONLY)
    assert Path(target, "README").read_bytes() == b"v1\n"
    node.unpublish(target, "r27-st")
    node.unstage(inside, "r27-st")


@pytest.mark.fuse
def test_unpublish_and_unstage_outside_the_kubelet_dir_touch_nothing(
    node: Plugin, csi_env: CsiEnv, outside: Path
) -> None:
    """They answer OK (nothing was ever published there) without removing the host's empty dir."""
    empty = outside / "spool"
    empty.mkdir()
    node.unpublish(str(empty), "r27-un")
    node.unstage(str(empty), "r27-un")
    assert empty.is_dir()


@pytest.mark.fuse
def test_a_nul_byte_in_a_path_is_invalid_argument_on_every_node_rpc(node: Plugin, csi_env: CsiEnv) -> None:
    path = csi_env.target("r27-nul") + "\0x"
    calls = {
        "publish": lambda: node.publish(path, CONTEXT, volume_id="r27-nul"),
        "publish (staging)": lambda: node.publish(
            csi_env.target("r27-nul2"), CONTEXT, volume_id="r27-nul", staging=path
        ),
        "stage": lambda: node.stage(path, CONTEXT, volume_id="r27-nul", mode=Mode.SINGLE_NODE_READER_ONLY),
        "unpublish": lambda: node.unpublish(path, "r27-nul"),
        "unstage": lambda: node.unstage(path, "r27-nul"),
        "stats": lambda: node.stats(path, "r27-nul"),
    }
    for what, call in calls.items():
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "NUL" in err.value.details(), what


def test_the_kubelet_dir_may_itself_be_a_symlink(tmp_path: Path) -> None:
    """``/var/lib/kubelet`` is often a link to a data disk: paths named either way are inside."""
    real = tmp_path / "data" / "kubelet"
    (real / "pods" / "p").mkdir(parents=True)
    link = tmp_path / "kubelet"
    link.symlink_to(real)
    node = NodeService(
        load_config(env={}, overrides={"home": str(tmp_path / "home")}),
        tmp_path / "state",
        "n",
        kubelet_dir=link,
    )
    want = str(real / "pods" / "p" / "mount")
    for path in (str(link / "pods" / "p" / "mount"), want):
        assert node._in_kubelet_dir("NodePublishVolume", "v", "target_path", path) == want
    for path in (str(real), str(tmp_path / "data" / "kubelet2" / "x"), "/etc/x"):  # not strictly under it
        with pytest.raises(InvalidInput, match="outside the kubelet's directory"):
            node._in_kubelet_dir("NodePublishVolume", "v", "target_path", path)


def test_the_plugin_defaults_to_the_kubelets_own_dir() -> None:
    from csi.__main__ import build_parser
    from csi.node import DEFAULT_KUBELET_DIR

    assert build_parser().parse_args([]).kubelet_dir == DEFAULT_KUBELET_DIR == "/var/lib/kubelet"


def test_the_node_manifest_mounts_the_kubelet_paths_under_its_kubelet_dir() -> None:
    """The DaemonSet's plugin gets the kubelet's pods and staging dirs at their host paths, and
    both lie under the ``--kubelet-dir`` it passes: the targets the kubelet names are served."""
    from csi.__main__ import build_parser
    from tests.csi.test_deploy import container, objects

    [ds] = objects("DaemonSet")
    plugin = container(ds, "datahub-csi")
    kubelet_dir = build_parser().parse_args(plugin["args"]).kubelet_dir
    assert kubelet_dir == "/var/lib/kubelet"
    mounted = {m["mountPath"] for m in plugin["volumeMounts"]}
    for path in ("/var/lib/kubelet/pods", "/var/lib/kubelet/plugins/kubernetes.io/csi"):
        assert path in mounted and path.startswith(kubelet_dir + "/")
