"""review15c: newuser15's refusal of a mount with no catalog (``mount_cmd.require_catalog``)
and ``datahub ls``'s hints, attacked through the real ``datahub`` command.

- A relative ``--home`` is refused as an absolute one is, naming the resolved path, and
  leaves nothing behind (no directory made under the working directory).
- A bucket mount on a fresh home is not refused: it mounts, reads, and makes the catalog it
  keeps its snapshots in (tests/fuse would need its shared home; this is the command a new
  user types).
- ``ls`` that lists nothing: ``--json`` output and the exit code unchanged, ``--limit 0``
  says nothing, a missing version is still exit 3 (the hint never turns an error into
  another).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import zygote
from tests.ingest.conftest import write_tree

FILES = {"train/cat/1.jpg": b"c1", "val/cat/3.jpg": b"c3"}


def datahub(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "datahub.cli.main", *args]
    return zygote.run(argv, timeout=timeout, cwd=cwd)  # a fork of a pre-imported interpreter


def test_a_mount_under_a_relative_home_without_a_catalog_is_refused_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "mnt").mkdir()
    for how in ("--background", "--foreground"):
        proc = datahub(tmp_path, "--home", "typo-home", "mount", how, "mnt", "sample@v1")
        assert proc.returncode == 3, (proc.returncode, proc.stderr)
        assert f"no catalog at {tmp_path / 'typo-home' / 'catalog.db'}" in proc.stderr, proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mnt"]
        proc = datahub(
            tmp_path, "--home", "typo-home", "mount", how, "--workspace", "w", "mnt", "--commit-to", "d"
        )
        assert proc.returncode == 3 and "--commit-to d commits into a catalog" in proc.stderr, proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mnt"]


@pytest.mark.fuse
def test_a_bucket_mount_on_a_fresh_home_mounts_and_makes_its_catalog(tmp_path: Path) -> None:
    bucket = write_tree(tmp_path / "bucket", FILES)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    home = tmp_path / "fresh"
    proc = datahub(tmp_path, "--home", str(home), "mount", "--background", str(mnt), bucket.as_uri())
    try:
        assert proc.returncode == 0, proc.stderr
        assert {k: (mnt / k).read_bytes() for k in FILES} == FILES
        assert (home / "catalog.db").exists()
    finally:
        done = datahub(tmp_path, "--home", str(home), "umount", str(mnt))
        assert done.returncode == 0 or not os.path.ismount(mnt), done.stderr
    assert not os.path.ismount(mnt)


def test_ls_that_lists_nothing_keeps_json_exit_codes_and_errors(tmp_path: Path) -> None:
    home = tmp_path / "var"
    src = write_tree(tmp_path / "src", FILES)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"url": (src / k).as_uri(), "key": k}) + "\n" for k in FILES))
    assert datahub(tmp_path, "--home", str(home), "import", str(manifest), "--to", "pets").returncode == 0

    def ls(*args: str) -> tuple[int, str, str]:
        proc = datahub(tmp_path, "--home", str(home), *args)
        return proc.returncode, proc.stdout, proc.stderr

    assert ls("--json", "ls", "pets", "--prefix", "nope/", "--filter", "labels.x=1") == (0, "", "")
    assert ls("ls", "pets", "--prefix", "nope/", "--limit", "0") == (0, "", "")
    code, out, err = ls("--json", "ls", "pets", "--prefix", "val/")
    assert (
        code == 0 and [json.loads(line)["key"] for line in out.splitlines()] == ["val/cat/3.jpg"] and not err
    )
    code, out, err = ls("ls", "pets@v9", "--prefix", "nope/")
    assert code == 3 and out == "" and "no record" not in err, (code, err)
    code, out, err = ls("ls", "nosuch", "--prefix", "nope/")
    assert code == 3 and out == "" and "no record" not in err, (code, err)
