"""newuser36: ``-o`` into a directory that refuses new files, and onto a full file system.

``datahub export DS -o /proc/x`` (as root: the mode bits allow it) read the whole version, then
ended in "FileNotFoundError ... this is a datahub bug"; ``-o`` onto a full disk said "No space
left on device; free space on that file system" without naming the path being written."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.cli.test_cli import dh, src  # noqa: F401 - fixtures
from tests.tmpfs import small_tmpfs


def test_export_into_a_directory_refusing_new_files_names_it_before_it_reads(dh, src):  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    code, out, err = dh("export", "pets", "-o", "/proc/pets.ndjson")
    assert code == 2 and out == "", (code, err)
    assert err.startswith("error: -o /proc/pets.ndjson: "), err
    assert "/proc" in err and "write elsewhere" in err and "bug" not in err, err
    assert "export pets@v1" not in err  # said before a record was read: no progress line


def test_export_onto_a_full_file_system_names_the_path_and_leaves_nothing(dh, src, tmp_path):  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    with small_tmpfs(tmp_path / "full", "64k") as full:
        subprocess.run(["dd", "if=/dev/zero", f"of={full / 'filler'}", "bs=4k"], capture_output=True)
        target = full / "pets.ndjson"
        code, out, err = dh("export", "pets", "-o", str(target))
        left = sorted(os.listdir(full))
    assert code == 7, (code, err)
    assert f"error: -o {target}: out of space writing it (No space left on device); " in err, err
    assert f"free space on the file system of {full} or write elsewhere" in err, err
    assert "bug" not in err and "datahub export failed" not in err, err
    assert left == ["filler"]  # no half-written file, no temporary one


def test_export_onto_a_device_that_is_full_names_it() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    from datahub.console.output import output_file, written
    from datahub.errors import NoSpace

    with pytest.raises(NoSpace) as caught, written(output_file("/dev/full"), "w") as fh:
        fh.write("x" * 65536)
    assert str(caught.value).startswith("-o /dev/full: out of space writing it"), caught.value
