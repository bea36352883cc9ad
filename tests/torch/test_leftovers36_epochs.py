"""A TaskStream's job is one epoch: iterating the same stream again (a DataLoader with
persistent_workers=True, as recommend_loader_settings suggests) yielded nothing, silently."""

from __future__ import annotations

import functools

import pytest

from datahub.config import Config
from datahub.errors import JobFinished
from datahub.tasks import open_task_queue
from tests.loader_workers import end_workers


def _produce(task):
    return [task.payload["shard"] * 10 + j for j in range(2)]


def _expected(shards: int) -> list[int]:
    return sorted(s * 10 + j for s in range(shards) for j in range(2))


def test_a_second_epoch_over_persistent_workers_is_an_error_naming_the_job(config: Config) -> None:
    from datahub.torch import TaskStream, shard_epoch
    from datahub.torch._torch import DataLoader

    open_queue = functools.partial(open_task_queue, config.resolved_catalog_url)
    queue = open_queue()
    job = shard_epoch(queue, "persist-epoch", 4)
    queue.close()
    stream = TaskStream(open_queue, job, _produce, poll_seconds=0.05)
    loader = DataLoader(stream, batch_size=None, num_workers=2, persistent_workers=True)
    assert sorted(loader) == _expected(4)  # the first epoch: every sample once
    with pytest.raises(Exception) as caught:  # the worker's error, re-raised by the DataLoader
        list(loader)
    text = str(caught.value)
    assert "JobFinished" in text and "'persist-epoch'" in text and "shard_epoch" in text
    assert "persistent_workers=False" in text
    end_workers(loader._iterator)  # now, not in a later test (tests/loader_workers.py)


def test_the_same_stream_iterated_again_in_one_process_raises(config: Config) -> None:
    from datahub.torch import TaskStream, shard_epoch

    open_queue = functools.partial(open_task_queue, config.resolved_catalog_url)
    queue = open_queue()
    job = shard_epoch(queue, "again-epoch", 3)
    queue.close()
    stream = TaskStream(open_queue, job, _produce)
    assert sorted(stream) == _expected(3)
    with pytest.raises(JobFinished) as caught:
        list(stream)
    assert caught.value.code == "job_finished" and caught.value.details == {"job": "again-epoch"}


def test_a_worker_joining_a_finished_job_ends_quietly_and_a_new_epoch_job_works(config: Config) -> None:
    from datahub.torch import TaskStream, shard_epoch

    open_queue = functools.partial(open_task_queue, config.resolved_catalog_url)
    queue = open_queue()
    job = shard_epoch(queue, "late-epoch-0", 2)
    assert sorted(TaskStream(open_queue, job, _produce)) == _expected(2)
    assert list(TaskStream(open_queue, job, _produce, name="late")) == []  # joined as it ended
    # a stream left early (not over) may be iterated again: it goes on claiming
    nxt = TaskStream(open_queue, shard_epoch(queue, "late-epoch-1", 2), _produce, poll_seconds=0.01)
    first = iter(nxt)
    got = [next(first)]
    first.close()
    got += list(nxt)
    assert sorted(set(got)) == _expected(2)
    queue.close()
