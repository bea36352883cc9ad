"""review44: a claim whose answer was lost stalled the epoch until its lease expired.

Over an API server, a worker's claim the server made but whose answer never arrived (a cut
connection, a timeout, a 5xx of a gateway) was retried by the client, and the retry took the
*next* task: the first stayed leased to a holder that did not know it, so the epoch's end
waited for that lease to expire (60 s by default) before anyone took it over. A claim now
carries a claim id (made by the client once, the same on every retry), and the queue answers
a repeated id with the task it claimed under it, as long as the caller still holds it."""

from __future__ import annotations

import threading
from pathlib import Path

from datahub.tasks import DOING, DONE, TODO, TaskQueue
from datahub.tasks.http import HttpTaskQueue
from datahub.tasks.sqlite import SqliteTaskQueue
from tests.catalog.remote import serve
from tests.catalog.test_http_store import FAST, _DropFirstCommitAnswer
from tests.tasks.test_queue import FakeClock, clock, queue, shared_api  # noqa: F401 - the conformance fixtures


def _payloads(n: int) -> list[dict]:
    return [{"n": i} for i in range(n)]


def test_a_repeated_claim_id_answers_the_same_task_while_its_claimer_holds_it(
    queue: TaskQueue,  # noqa: F811
    clock: FakeClock,  # noqa: F811
) -> None:
    queue.create_job("j", _payloads(3), {"kind": "test"})
    first = queue.claim("j", "w1", 30, claim_id="claim-1")
    assert first is not None and first.index == 0
    clock.now += 10
    again = queue.claim("j", "w1", 30, claim_id="claim-1")  # the retry after a lost answer
    assert again is not None and (again.index, again.lease, again.attempts) == (0, first.lease, 1)
    assert again.lease_until == clock.now + 30  # its lease runs from the retry
    other = queue.claim("j", "w2", 30, claim_id="claim-2")
    assert other is not None and other.index == 1  # another id: another task
    assert dict(queue.get_job("j").counts) == {DOING: 2, TODO: 1}
    queue.complete("j", 0, first.lease, {"ok": 1})
    done_then = queue.claim("j", "w1", 30, claim_id="claim-1")  # its task is done: nothing to repeat
    assert done_then is not None and done_then.index == 2
    clock.now += 31  # the leases expire (no task is TODO): a claim without an id steals task 1
    thief = queue.claim("j", "w3", 30)
    assert thief is not None and thief.index == 1 and thief.attempts == 2
    late = queue.claim("j", "w2", 30, claim_id="claim-2")  # no longer its claimer's: a fresh claim
    assert late is not None and late.index != 1 and late.lease != thief.lease


def test_a_claim_id_is_its_holders_only(tmp_path: Path, clock: FakeClock) -> None:  # noqa: F811
    q = SqliteTaskQueue(tmp_path / "q.db", clock)
    q.create_job("j", _payloads(2), {})
    mine = q.claim("j", "a", 30, holder="alice", claim_id="shared-id")
    theirs = q.claim("j", "b", 30, holder="bob", claim_id="shared-id")  # bob names alice's id
    assert mine is not None and theirs is not None and (mine.index, theirs.index) == (0, 1)
    assert theirs.lease != mine.lease
    q.close()


class _DropFirstClaimAnswer(_DropFirstCommitAnswer):
    """A loopback proxy that drops the answer to the first claim, which the server made."""

    def deliver(self, request_line: bytes, answer: bytes) -> bytes:
        is_claim = request_line.startswith(b"POST ") and b"/claim " in request_line
        self.commits_seen += is_claim  # here: claims seen
        drop = is_claim and self.dropped == 0
        self.dropped += drop
        return b"" if drop else answer


def test_a_claim_whose_answer_is_lost_gets_the_task_the_server_claimed(tmp_path: Path) -> None:
    server, backing, token = serve(tmp_path)
    proxy = _DropFirstClaimAnswer(("127.0.0.1", server.port))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_address[1]}"
    worker = HttpTaskQueue(url, token=token, **FAST)
    try:
        worker.create_job("epoch", _payloads(2), {"kind": "epoch"})
        task = worker.claim("epoch", "w1", 60)
        assert (proxy.dropped, proxy.commits_seen) == (1, 2)  # the answer was lost, the retry answered
        assert task is not None and task.index == 0 and task.attempts == 1
        assert dict(worker.get_job("epoch").counts) == {DOING: 1, TODO: 1}  # no task leased to nobody
        worker.complete("epoch", task.index, task.lease, {})
        nxt = worker.claim("epoch", "w1", 60)
        assert nxt is not None and nxt.index == 1
        worker.complete("epoch", nxt.index, nxt.lease, {})
        assert dict(worker.get_job("epoch").counts) == {
            DONE: 2
        }  # the epoch ends now, not at a lease's expiry
    finally:
        worker.close()
        proxy.shutdown()
        proxy.server_close()
        server.stop()
        backing.close()
