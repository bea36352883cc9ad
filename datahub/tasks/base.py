"""The durable task queue contract: jobs split into numbered tasks handed out under leases.

A task moves TODO -> DOING (owned by one worker until ``lease_until``) -> DONE, or FAILED
when its work reported a permanent error.

Who holds a task is decided by the queue, never by the worker's word: a claim draws a fresh
random lease id (``Task.lease``; over an API server only the claim's answer carries it,
listings never do) and records the holder (the authenticated principal behind an API
server, ``""`` in local mode, where opening the database is all the authority there is);
renew, complete, fail and release act only for the caller presenting that lease id as that
holder. A worker's name (``Task.owner``) is a display label: naming another worker proves
nothing.

A DOING task whose lease has expired is claimable again (lease stealing, under a new lease
id): that is how a worker that died or hung gives its task back without anybody noticing
its death. Claims are atomic in the store, so of two workers racing for one task exactly
one wins.

The queue lives in the catalog's database (same SQLite file, same Mongo database) so a
job is exactly as durable and as shared as the catalog it writes to. Time comes from an
injected clock (wall-clock seconds by default, since leases are compared across machines).
"""

from __future__ import annotations

import abc
import json
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from datahub.errors import Conflict, InvalidInput, JobNotFound, LeaseLost
from datahub.validation import JSON_INT_MAX, JSON_INT_MIN, LONG_DIGITS, unstorable

TODO, DOING, DONE, FAILED = "TODO", "DOING", "DONE", "FAILED"
STATES = (TODO, DOING, DONE, FAILED)

Clock = Callable[[], float]
__all__ = [
    "DOING",
    "DONE",
    "FAILED",
    "STATES",
    "TODO",
    "Clock",
    "Job",
    "JobNotFound",
    "LeaseLost",
    "Task",
    "TaskQueue",
    "check_job_json",
    "check_task_json",
    "joined_meta",
    "lease_lost",
    "new_claim_id",
    "new_lease",
]


@dataclass(frozen=True, slots=True)
class Task:
    job: str
    index: int
    state: str
    payload: Mapping[str, Any]
    owner: str = ""
    lease_until: float = 0.0
    attempts: int = 0
    result: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    lease: str = ""  # the holder's proof; "" where the caller is not the holder (listings over HTTP)


def new_lease() -> str:
    """An unguessable lease id: 128 random bits, so a lease cannot be named, only be held."""
    return secrets.token_urlsafe(16)


def new_claim_id() -> str:
    """A caller's id for one claim (``TaskQueue.claim``'s ``claim_id``), sent again on a retry."""
    return secrets.token_urlsafe(16)


def check_task_json(job: str, what: str, value: Mapping[str, Any]) -> None:
    """InvalidInput naming ``job``, ``what`` (``"the payload of task 3"``, ``"its meta"``, ``"the
    result of task 3"``), the value and what to write instead, if ``value`` holds what MongoDB's
    BSON cannot: an integer beyond signed 64 bits, text with a lone surrogate (no UTF-8 form) or
    a key with a NUL character.

    Why (review74): the SQLite queue kept them (its JSON text) while MongoDB's driver failed on
    them (``OverflowError``, ``UnicodeEncodeError``, ``InvalidDocument``: "this is a datahub
    bug", a 500 from the API), so the same job was made on one store and not the other, as
    records' meta and labels were before review73 (``validation.check_json_field``). Every store
    refuses it alike, before anything is written."""
    why = _not_bson(value)
    if why is not None:
        raise InvalidInput(f"task job {job!r}: {what} holds {why}", job=job)


def check_job_json(job: str, payloads: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> None:
    """``check_task_json`` of a new job's meta and each of its payloads: all payloads encoded at
    once (one C call), and walked one by one only when that text shows a candidate (a
    ``\\uD800``-``\\uDFFF`` or ``\\u0000`` escape, or 19 digits in a row)."""
    check_task_json(job, "its meta", meta)
    try:
        text = json.dumps(payloads if isinstance(payloads, list) else list(payloads))
    except (TypeError, ValueError):  # not JSON: the store refuses it as before; look anyway
        text = ""
    if text and not (_ESCAPES.search(text) if "\\u" in text else None) and not LONG_DIGITS.search(text):
        return
    for index, payload in enumerate(payloads):
        check_task_json(job, f"the payload of task {index}", payload)


_ESCAPES = re.compile(r"\\u(?:[dD][89a-fA-F]|0000)")  # json.dumps writes lone surrogates and NUL so


def _not_bson(value: Any) -> str | None:
    """What of a JSON value no task queue store holds alike (``validation.unstorable``), said
    with what to write instead; None if nothing."""
    found = unstorable(value)
    if found is None:
        return None
    kind, node = found
    if kind == "text":
        return f"the text {node!r}, which has no UTF-8 form (a lone surrogate); send valid UTF-8 text"
    if kind == "key":
        return f"the key {node!r}, whose NUL character no MongoDB field name holds; rename it"
    return (
        f"the integer {node}, beyond the signed 64-bit range ({JSON_INT_MIN} to {JSON_INT_MAX}) "
        f'that every task queue store holds; write it as a string ("{node}")'
    )


def lease_lost(job: str, index: int) -> LeaseLost:
    """The one answer for a lease that does not hold ``index``: expired and stolen, or never the caller's."""
    return LeaseLost(
        f"this lease no longer holds task {index} of job {job}: it expired and another worker took "
        "the task, or it is not the lease this caller's claim returned; this attempt's result is discarded",
        job=job,
        task=index,
    )


def joined_meta(job: str, recorded: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The meta ``create_job`` records for ``job``, whose meta so far is ``recorded`` (None: new).

    A job's ``version`` (meta) names the input its tasks were made for (an epoch's packed
    version, ``dataset@vN``). A call naming another one is a Conflict naming the job, both
    versions and what to do; a call naming none keeps the recorded one. Why: the tasks of an
    epoch are shard numbers, so a second process joining a job with another version's dataset
    read that version's shards under the first one's tasks, and one epoch mixed the samples of
    two versions (review44). Jobs that name no version (pack jobs: their id names the source
    version) keep the rule of a task count only."""
    new = dict(meta)
    if recorded is None:
        return new
    had, wants = recorded.get("version"), new.get("version")
    if had is not None and wants is not None and had != wants:
        raise Conflict(
            f"task job {job!r} is an epoch over {had}, not {wants}: its tasks were made for {had}'s "
            f"shards, and reading {wants}'s under them would mix two versions' samples in one epoch. "
            f"Open {had} to join this epoch, or give {wants} a job of its own (another job name, "
            f"e.g. {job + '-' + str(wants)!r}; or delete_job({job!r}) first if {had}'s epoch is abandoned)",
            job=job,
            version=wants,
            recorded=had,
        )
    if wants is None and had is not None:
        new["version"] = had  # a caller that names no version cannot be checked: the epoch keeps its own
    return new


@dataclass(frozen=True, slots=True)
class Job:
    job: str
    meta: Mapping[str, Any]
    total: int
    counts: Mapping[str, int]  # state -> number of tasks
    created_at: float = 0.0

    @property
    def done(self) -> bool:
        return self.counts.get(DONE, 0) == self.total

    @property
    def failed(self) -> bool:
        return self.counts.get(FAILED, 0) > 0


class TaskQueue(abc.ABC):
    """Implemented by ``SqliteTaskQueue`` and ``MongoTaskQueue``; one conformance suite tests both."""

    clock: Clock = time.time

    @abc.abstractmethod
    def create_job(self, job: str, payloads: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Job:
        """Create ``job`` with one TODO task per payload (task i gets ``payloads[i]``).

        Idempotent: if the job exists with the same number of tasks, its tasks are left as
        they are (DONE work stays done) and only ``meta`` is replaced; a different task
        count raises Conflict, since a deterministic split of one input never changes. So
        does a ``version`` in ``meta`` other than the one the job recorded (``joined_meta``),
        checked in the same transaction as the replacement.
        """

    @abc.abstractmethod
    def get_job(self, job: str) -> Job:
        """Meta and per-state counts; JobNotFound naming the job if absent."""

    @abc.abstractmethod
    def claim(
        self, job: str, worker: str, lease_seconds: float, *, holder: str = "", claim_id: str = ""
    ) -> Task | None:
        """Atomically take the lowest-numbered TODO task, or a DOING task whose lease expired.

        The returned task carries a new ``lease`` id, recorded with ``holder``; ``worker`` is
        only a label. None when nothing is claimable right now (all DONE/FAILED, or leased).

        ``claim_id`` (``new_claim_id``, made once per claim by the caller and sent again when it
        retries): a claim repeating the id of a task ``holder`` still holds (DOING, taken under
        that id, not stolen since) answers that same task and lease, its lease extended by
        ``lease_seconds``, instead of taking another. Why: over an API server a claim the server
        made whose answer was lost (a cut connection, a timeout) left its task leased to nobody
        who knew it, and the retry took the next task: the epoch stalled on the first until
        its lease expired (review44). "" (none) always claims afresh.
        """

    @abc.abstractmethod
    def renew(self, job: str, index: int, lease: str, lease_seconds: float, *, holder: str = "") -> Task:
        """Extend the lease; LeaseLost unless ``lease`` (held by ``holder``) still holds the task."""

    @abc.abstractmethod
    def complete(
        self, job: str, index: int, lease: str, result: Mapping[str, Any], *, holder: str = ""
    ) -> Task:
        """DOING -> DONE with ``result``; LeaseLost as for renew."""

    @abc.abstractmethod
    def fail(self, job: str, index: int, lease: str, error: str, *, holder: str = "") -> Task:
        """DOING -> FAILED with ``error`` (a permanent failure); LeaseLost as for renew."""

    @abc.abstractmethod
    def release(self, job: str, index: int, lease: str, *, holder: str = "") -> None:
        """DOING -> TODO: a worker leaving gracefully hands its task back at once (no-op if not held)."""

    @abc.abstractmethod
    def retry_failed(self, job: str) -> int:
        """FAILED -> TODO for every failed task of ``job``; returns how many."""

    @abc.abstractmethod
    def tasks(self, job: str) -> Iterator[Task]:
        """Every task of ``job`` in index order."""

    @abc.abstractmethod
    def delete_job(self, job: str) -> None:
        """Remove a job and its tasks (idempotent)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""
