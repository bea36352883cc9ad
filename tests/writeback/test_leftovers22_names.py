"""leftovers22: names a workspace refuses where they enter it, as a mount would.

1. A name over 255 bytes was refused with EINVAL through the Workspace API while a mount
   answers ENAMETOOLONG for it (the kernel's): now both ENAMETOOLONG (``NameTooLong``).
2. A name ``check_new_key`` refuses (invisible format characters, a ``.datahub-hint-`` name:
   shown by no mount) was taken at create, mkdir and rename, acknowledged, and refused only
   by the workspace's commit. Now refused where it is brought in, naming it and what to do.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from datahub.errors import InvalidKey, NameTooLong
from tests.writeback.conftest import Env, make_env, write


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    env: Env = make_env(tmp_path_factory.mktemp("leftovers22-names"))
    workspace = env.open()
    workspace.mkdir("d")
    write(workspace, "d/kept", b"k")
    yield workspace
    env.close()


def _attempts(ws, name: str) -> list:
    return [
        lambda: ws.open(f"d/{name}", create=True),
        lambda: ws.mkdir(f"d/{name}"),
        lambda: ws.rename("d/kept", f"d/{name}"),
        lambda: ws.open(f"{name}/x", create=True),
    ]


@pytest.mark.parametrize("name", ["n" * 256, "é" * 128])
def test_a_name_over_255_bytes_is_enametoolong_as_through_a_mount(ws, name: str) -> None:
    for attempt in _attempts(ws, name):
        with pytest.raises(NameTooLong) as caught:
            attempt()
        assert caught.value.errno == errno.ENAMETOOLONG
        assert name[:10] in caught.value.message and "255 bytes" in caught.value.message
    assert [n for n, _ in ws.listdir("d")] == ["kept"]


@pytest.mark.parametrize("name", ["a\u200bb", ".datahub-hint-x", "r\u202eevil.jpg"])
def test_a_name_the_catalog_cannot_hold_is_refused_where_it_enters(ws, name: str) -> None:
    for attempt in _attempts(ws, name):
        with pytest.raises(InvalidKey) as caught:
            attempt()
        assert caught.value.errno == errno.EINVAL
        assert repr(name)[1:-1] in caught.value.message and "choose another name" in caught.value.message
    assert [n for n, _ in ws.listdir("d")] == ["kept"]
    assert [n for n, _ in ws.listdir("")] == ["d"]


def test_names_a_commit_takes_are_still_taken(ws) -> None:
    for name in ("plain.jpg", "é" * 127, ".hidden", "a b"):
        write(ws, f"d/{name}", b"x")
        ws.unlink(f"d/{name}")
