"""The one-line progress bar long commands print (``datahub.console.context.Progress``).

Seen at a 10^8-row ``datahub migrate``: "0/104960000 (0%) 0/s 0.0 MiB eta 0s", a byte count
for work that counts none and an eta of 0 s before any rate was known.
"""

from __future__ import annotations

import io

from datahub.console.context import Progress


def lines(progress: Progress, stream: io.StringIO) -> list[str]:
    progress.close()
    return stream.getvalue().splitlines()


def test_rows_without_bytes_show_no_mib_and_no_eta_before_a_rate() -> None:
    out = io.StringIO()  # not a terminal: a line every 10 %
    progress = Progress(104_960_000, "migrate big: directory table, records", out)
    progress.update(0)
    first = out.getvalue().splitlines()[0]
    assert first == "migrate big: directory table, records: 0/104,960,000 (0%) 0/s eta ? "
    progress.update(10_496_000)
    assert "MiB" not in lines(progress, out)[1]


def test_work_that_counts_bytes_shows_them() -> None:
    out = io.StringIO()
    progress = Progress(None, "import s3://b/p", out)
    progress.update(3, nbytes=3 * 2**20)
    (line,) = lines(progress, out)
    assert line.startswith("import s3://b/p: 3 ") and line.endswith(" 3.0 MiB done")


def test_work_that_fails_never_says_done(tmp_path) -> None:
    """``datahub import s3:/bucket/x --to d`` printed "import s3:/bucket/x: 0 0/s done", then the
    error: the line a user reads first said the import was done."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("datahub")  # the console script a user types
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("DATAHUB_CONFIG", None)
    argv = [str(exe), "--home", str(tmp_path / "var"), "import", "s3:/bucket/x", "--to", "d"]
    run = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "invalid storage URL 's3:/bucket/x'" in run.stderr
    assert "done" not in run.stderr, run.stderr
    out = io.StringIO()
    try:
        with Progress(10, "import s3://b/p", out) as progress:
            progress.update(4)
            raise OSError("disk full")
    except OSError:
        pass
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("import s3://b/p: 4/10 (40%) ") and last.endswith(" stopped by an error"), last
    with Progress(10, "import s3://b/p", out) as progress:
        progress.update(10)
    assert out.getvalue().endswith(" done\n")
