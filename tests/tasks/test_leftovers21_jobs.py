"""A missing task job's message names how a job of its kind is made.

The queues (and the API in front of them) said "start it with `datahub pack` first" of every
job, though `datahub pack` makes pack jobs only: a TaskStream's epoch is made by
``shard_epoch`` (tests/torch/test_newuser20b.py holds the stream's own message).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main
from datahub.tasks import JobNotFound, open_task_queue


def test_a_pack_worker_of_a_missing_job_names_the_pack_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a home with a catalog: on a home with none, pack-worker exits 3 naming it (claims22)
    assert main(["--home", str(tmp_path / "home"), "init"]) == 0
    capsys.readouterr()
    code = main(["--home", str(tmp_path / "home"), "pack-worker", "--job", "pack-nope"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "task job 'pack-nope' not found" in err and "`datahub pack SRC@REF --to DST`" in err, err
    assert "shard_epoch" not in err, err


def test_a_queue_that_cannot_know_the_kind_names_every_way(tmp_path: Path) -> None:
    queue = open_task_queue(f"sqlite:///{tmp_path / 'tasks.db'}")
    try:
        with pytest.raises(JobNotFound) as info:
            queue.get_job("epoch-3")
    finally:
        queue.close()
    message = str(info.value)
    assert "'epoch-3' not found" in message
    assert "`datahub pack SRC@REF --to DST`" in message and "shard_epoch(queue, JOB" in message, message
