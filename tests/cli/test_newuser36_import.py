"""newuser36: ``datahub import notes.txt --to d``, a file given to import as itself.

A regular file is read as a manifest, so it said "manifest notes.txt line 1: URL 'hi' has an
unsupported scheme: use s3://, file:// or memory://", a riddle to whoever meant the file. A
first line that is no JSON, of a file not named ``.jsonl``/``.ndjson``, now says it was read
as a manifest and how to import files. A ``.jsonl`` manifest's mistakes read as before.
"""

from __future__ import annotations

from tests.cli.test_cli import dh  # noqa: F401 - fixture


def test_a_plain_file_given_to_import_says_it_was_read_as_a_manifest(dh, tmp_path):  # noqa: F811
    notes = tmp_path / "notes.txt"
    notes.write_text("hi\n")
    code, out, err = dh("import", str(notes), "--to", "notes")
    assert (code, out) == (2, ""), err
    assert err.startswith(f"error: manifest {notes} line 1: URL 'hi' has an unsupported scheme: "), err
    assert err.endswith(
        f"; {notes} is read as a manifest (one URL or JSON object per line): to import files "
        "themselves, give their directory\n"
    ), err
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("hi\n")
    code, _, err = dh("import", str(manifest), "--to", "notes")
    assert code == 2 and "read as a manifest" not in err, err  # named as one: the line's own words
    assert dh("log", "notes")[0] == 3  # nothing created
