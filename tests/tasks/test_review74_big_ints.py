"""review74: what MongoDB's BSON cannot hold in a task job's payloads, meta or a task's result
(an integer beyond signed 64 bits, text with a lone surrogate, a key with a NUL character) was
kept by the SQLite queue and a bare driver error on MongoDB (``OverflowError``,
``UnicodeEncodeError``, ``InvalidDocument``: a 500 from the API): the same job depended on the
store, as records' meta and labels did before review73. Every store refuses it alike now
(InvalidInput naming the job, the task, the value and what to write, nothing written); the
64-bit bounds themselves are kept and read back exactly everywhere.
"""

from __future__ import annotations

import pytest

from datahub.errors import InvalidInput
from datahub.tasks import DOING, JobNotFound, TaskQueue
from tests.tasks.test_queue import clock, queue, shared_api  # noqa: F401 - fixtures

LOW, HIGH = -(2**63), 2**63 - 1


def test_the_64_bit_bounds_are_kept_on_every_store(queue: TaskQueue) -> None:  # noqa: F811
    queue.create_job("j", [{"seed": HIGH}, {"ids": [LOW, HIGH]}], {"n": LOW})
    assert queue.get_job("j").meta == {"n": LOW}
    assert [t.payload for t in queue.tasks("j")] == [{"seed": HIGH}, {"ids": [LOW, HIGH]}]
    task = queue.claim("j", "w", 60.0)
    assert task is not None
    queue.complete("j", task.index, task.lease, {"hash": HIGH})


@pytest.mark.parametrize(
    ("payloads", "meta", "said"),
    [
        ([{"a": 1}, {"seed": 2**64 - 1}], {}, "the payload of task 1 holds the integer 18446744073709551615"),
        ([{"deep": {"ids": [1, HIGH + 1]}}], {}, f"the payload of task 0 holds the integer {HIGH + 1}"),
        ([{"a": 1}], {"n": LOW - 1}, f"its meta holds the integer {LOW - 1}"),
        ([{"a": "x"}, {"name": "caf\udce9"}], {}, "the payload of task 1 holds the text 'caf\\udce9'"),
        ([{"a\x00b": 1}], {}, "the payload of task 0 holds the key 'a\\x00b'"),
    ],
    ids=["payload", "nested", "meta", "lone-surrogate", "nul-key"],
)
def test_a_job_holding_an_integer_beyond_64_bits_is_refused_alike(
    queue: TaskQueue,  # noqa: F811
    payloads: list,
    meta: dict,
    said: str,
) -> None:
    with pytest.raises(InvalidInput) as refused:
        queue.create_job("j", payloads, meta)
    message = refused.value.message
    assert "task job 'j'" in message and said in message, message
    with pytest.raises(JobNotFound):
        queue.get_job("j")  # nothing made


def test_a_result_holding_one_is_refused_and_the_task_stays_taken(queue: TaskQueue) -> None:  # noqa: F811
    queue.create_job("j", [{"a": 1}], {})
    task = queue.claim("j", "w", 60.0)
    assert task is not None
    with pytest.raises(InvalidInput) as refused:
        queue.complete("j", task.index, task.lease, {"hash": 2**64})
    assert "the result of task 0 holds the integer 18446744073709551616" in refused.value.message
    assert [t.state for t in queue.tasks("j")] == [DOING]
    queue.complete("j", task.index, task.lease, {"hash": str(2**64)})  # as the message says
