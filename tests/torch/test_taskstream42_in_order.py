"""A TaskStream under a DataLoader with its default ``in_order=True``: every sample exactly once.

An in-order DataLoader asks its workers in turn and waits for the answer of the one whose
turn it is. A worker with nothing left to claim waited (polled) inside that request for the
tasks its siblings held, while the sibling holding the last task got no new request until
that waiting worker answered: the loader stalled until the task's lease expired, and the
waiting worker then claimed the task and delivered it a second time (duplicated samples).
docs/torch.md told users to pass ``in_order=False`` instead. Now a worker leaves its epoch
when a sibling of its own DataLoader holds the rest, and waits only for tasks held elsewhere.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import pytest

from datahub.config import Config
from datahub.tasks import DOING, DONE, TaskQueue, open_task_queue

LONG = 8  # samples of the long shard: more than a worker is asked for while its sibling waits


def _uneven(task) -> list[int]:
    """Shard 0 has one sample, shard 1 has LONG: whichever worker gets shard 0 (or claims
    both) runs out of work while a sibling holds shard 1 with samples nobody asked for yet."""
    shard = task.payload["shard"]
    return [shard * 100 + j for j in range(1 if shard == 0 else LONG)]


def _expected(shards: int) -> list[int]:
    return sorted(s * 100 + j for s in range(shards) for j in range(1 if s == 0 else LONG))


def _queue(config: Config) -> tuple[Callable[[], TaskQueue], TaskQueue]:
    open_queue = functools.partial(open_task_queue, config.resolved_catalog_url)
    return open_queue, open_queue()


@pytest.mark.parametrize(
    ("num_workers", "in_order"), [(0, True), (1, True), (1, False), (2, True), (2, False)]
)
def test_every_sample_once_and_no_task_waits_for_its_lease(
    config: Config, num_workers: int, in_order: bool
) -> None:
    from datahub.torch import TaskStream, shard_epoch
    from datahub.torch._torch import DataLoader

    open_queue, queue = _queue(config)
    job = shard_epoch(queue, f"in-order-{num_workers}-{in_order}", 2)
    # a short lease: before the fix the stalled loader waited for it, then got shard 1 twice
    stream = TaskStream(open_queue, job, _uneven, lease_seconds=3, poll_seconds=0.02)
    options = {"in_order": in_order} if num_workers else {}
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers, **options)
    # one sample more than the epoch has, at most: the stalled loader went on delivering copies
    assert sorted(itertools.islice(loader, len(_expected(2)) + 1)) == _expected(2)  # every sample, once
    tasks = list(queue.tasks(job))
    assert [t.state for t in tasks] == [DONE, DONE]
    assert [t.attempts for t in tasks] == [1, 1]  # each claimed once: no lease ran out
    queue.close()


def test_an_in_order_loader_still_takes_over_a_dead_workers_task_after_its_lease(config: Config) -> None:
    """A worker of another training process that died holding a task: this loader's workers
    do not all leave the epoch, one waits for the lease and delivers the task, once."""
    from datahub.torch import TaskStream, shard_epoch
    from datahub.torch._torch import DataLoader

    open_queue, queue = _queue(config)
    job = shard_epoch(queue, "dead-holder", 3)
    dead = queue.claim(job, "other-host:4242:0", lease_seconds=1)  # claims shard 0, never acts again
    assert dead is not None and dead.index == 0
    stream = TaskStream(open_queue, job, _uneven, lease_seconds=30, poll_seconds=0.02)
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    assert sorted(itertools.islice(loader, len(_expected(3)) + 1)) == _expected(3)
    tasks = list(queue.tasks(job))
    assert [t.state for t in tasks] == [DONE, DONE, DONE]
    assert [t.attempts for t in tasks] == [2, 1, 1]  # shard 0 taken over once its lease expired
    assert DOING not in queue.get_job(job).counts
    queue.close()
