"""``datahub import pics --to pics`` run where ``pics`` is (newuser19): the dataset's source,
the version's message and its lineage kept ``pics``, a path relative to a directory nobody
reading them knows (the browser showed "Source pics", ``datahub log`` "import pics")."""

from __future__ import annotations

import json

from tests.cli.test_cli import FILES, dh, src  # noqa: F401 - fixtures


def test_a_relative_directory_is_recorded_as_the_absolute_path_it_names(dh, src, tmp_path) -> None:  # noqa: F811
    assert src == tmp_path / "src"  # and dh runs in tmp_path: "src" is relative to it
    code, out, err = dh("import", "src", "--to", "pics")
    assert code == 0, err
    shown = json.loads(dh("dataset", "show", "pics", json_output=True)[1])
    assert shown["source"] == str(src), shown
    (version,) = json.loads(dh("log", "pics", json_output=True)[1])
    assert version["message"] == f"import {src}", version
    assert version["lineage"]["import"]["source"] == str(src), version
    # a path that is not there is quoted as typed
    code, _, err = dh("import", "nosuchdir", "--to", "pics")
    assert code == 2 and "import source 'nosuchdir' does not exist" in err, err
