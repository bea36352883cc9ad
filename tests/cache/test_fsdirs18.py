"""``datahub://`` over a version holding a key and keys under it (``x`` and ``x/y``, legal as on
S3: docs/catalog.md, "Limits"): it shows what a mount shows, the directory ``x`` (the file
``x`` hidden), in ls, info, find, walk, get and open, and never the file's bytes as ``x/y``'s."""

from __future__ import annotations

import pytest

from tests.cache.conftest import dataset_fs

KEYS = ["x", "x.txt", "x/y", "x/z/w", "z"]


@pytest.fixture
def fs(config, source):
    yield from dataset_fs(config, source, dict(zip(KEYS, [6, 3, 12, 4, 1], strict=True)), "x and x/y")


def test_the_directory_wins_over_the_file_of_its_name(fs, tmp_path) -> None:
    listed = fs.ls("ds@1")
    assert [(e["name"], e["type"]) for e in listed] == [
        ("ds@1/x.txt", "file"),
        ("ds@1/x", "directory"),
        ("ds@1/z", "file"),
    ]
    assert fs.ls("ds@1/x", detail=False) == ["ds@1/x/y", "ds@1/x/z"]
    assert fs.info("ds@1/x")["type"] == "directory" and fs.isdir("ds@1/x") and not fs.isfile("ds@1/x")
    assert fs.info("ds@1/x.txt")["size"] == 3
    assert fs.find("ds@1/x") == ["ds@1/x/y", "ds@1/x/z/w"]
    assert fs.find("ds@1") == ["ds@1/x.txt", "ds@1/x/y", "ds@1/x/z/w", "ds@1/z"]
    assert fs.find("ds@1", withdirs=True) == [
        "ds@1",
        "ds@1/x",
        "ds@1/x.txt",
        "ds@1/x/y",
        "ds@1/x/z",
        "ds@1/x/z/w",
        "ds@1/z",
    ]
    walked = {root: (sorted(dirs), sorted(files)) for root, dirs, files in fs.walk("ds@1")}
    assert walked == {
        "ds@1": (["x"], ["x.txt", "z"]),
        "ds@1/x": (["z"], ["y"]),
        "ds@1/x/z": ([], ["w"]),
    }
    with pytest.raises(IsADirectoryError, match=r"ds@1/x: a directory in ds@1"):
        fs.open("ds@1/x")
    with pytest.raises(IsADirectoryError):
        fs.cat_file("ds@1/x")
    assert fs.cat_file("ds@1/x/y") == fs.data["x/y"]

    fs.get("ds@1", str(tmp_path / "out"), recursive=True)
    out = tmp_path / "out"
    got = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert got == {k: fs.data[k] for k in ("x.txt", "x/y", "x/z/w", "z")}
