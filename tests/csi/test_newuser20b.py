"""A platform engineer's first volumes, driven over the plugin's gRPC socket: attribute values
the docs (docs/csi.md "Volumes", docs/kubernetes.md) take as numbers are checked at publish."""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Plugin, handed_clean


@pytest.fixture
def node(plugin: Plugin) -> Iterator[Plugin]:
    yield from handed_clean(plugin)


@pytest.mark.parametrize(
    ("attribute", "value"),
    [("uid", "4294967296"), ("gid", "99999999999999999999"), ("uid", "4294967295"), ("uid", "\u00b2")],
    ids=["uid-past-uid_t", "gid-past-uid_t", "uid-minus-one", "uid-superscript-two"],
)
def test_an_owner_that_is_no_linux_id_is_refused_at_publish(
    node: Plugin, csi_env: CsiEnv, attribute: str, value: str
) -> None:
    """A uid past uid_t was published, and the plugin then said NOT_FOUND "not a directory of
    owners@v1 (check the prefix attribute)" (the mount could show no owner that large); ``²``
    (which ``str.isdigit`` takes) failed as INTERNAL with a traceback in the plugin's log."""
    csi_env.commit("owners", {"a.txt": b"a"})
    target = csi_env.target(f"owner-{attribute}-{len(value)}")
    with pytest.raises(grpc.RpcError) as info:
        node.publish(target, {"dataset": "owners", attribute: value}, readonly=True)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert f"{attribute} " in info.value.details()  # names the attribute to fix
    assert not os.path.ismount(target) and node.state() == []


def test_an_owner_that_is_a_linux_id_is_still_published(node: Plugin, csi_env: CsiEnv) -> None:
    csi_env.commit("owners", {"a.txt": b"a"})
    target = csi_env.target("owner-ok")
    node.publish(target, {"dataset": "owners", "uid": "4294967294", "gid": "0"}, readonly=True)
    assert os.stat(os.path.join(target, "a.txt")).st_uid == 4294967294


@pytest.mark.parametrize("flag", ["--check-interval", "--mount-timeout", "--unmount-timeout"])
@pytest.mark.parametrize("value", ["0", "-5", "nan", "ten"])
def test_the_plugins_seconds_flags_refuse_what_is_no_positive_number(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--check-interval 0`` started a plugin whose supervisor checked every mount in a busy
    loop (``stop.wait(0)``: a core of the node); a timeout of 0 failed every mount or flush."""
    from csi.__main__ import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([flag, value])
    assert info.value.code == 2 and f"argument {flag}: " in capsys.readouterr().err


def test_the_plugins_help_says_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    """An operator reading ``python -m csi --help`` (docs/csi.md) saw no default for the
    endpoint, node id, mode, driver name or the timeouts."""
    from csi.__main__ import DRIVER_NAME, build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("unix:///csi/csi.sock", "(default: all)", DRIVER_NAME, "(default: 10.0)", "(default: 120.0)",
                  "(default: 600.0)", "$NODE_ID"):  # fmt: skip
        assert shown in text, shown
