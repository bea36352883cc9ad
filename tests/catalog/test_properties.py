"""Property test: random commits, tags and diffs agree with a tiny in-memory reference model.

For every store: every version's listing equals the model's, each version's counts match,
tags resolve to what the model says, and applying diff(a, b) to version a yields version b.
Stores use batch size 3 and page size 2 so every change set crosses batch and page borders.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import Catalog, Delete, Patch, Put, Record
from datahub.errors import NoChanges, RecordNotFound
from tests.catalog.conftest import make_store, rec

KEYS = ["a", "a/x", "b", "b/y/z", "c"]
TAGS = ["golden", "Test"]

ETAGS = ["e1", "e22"]
LABELS = [{}, {"class": "cat"}]


def draw_changes(data: st.DataObject, state: dict[str, Record]) -> list:
    """Up to 8 changes; deletes and patches mostly hit keys that exist in the running state
    (so most commits succeed), and now and then a missing key (which must be refused)."""
    running = set(state)
    changes: list = []
    for _ in range(data.draw(st.integers(0, 8))):
        kind = data.draw(st.sampled_from(["put", "put", "delete", "patch"]))
        if kind == "put" or not running:
            key = data.draw(st.sampled_from(KEYS))
            etag, labels = data.draw(st.sampled_from(ETAGS)), data.draw(st.sampled_from(LABELS))
            changes.append(Put(rec(key, etag=etag, size=len(etag), labels=labels)))
            running.add(key)
            continue
        pool = sorted(running) if data.draw(st.integers(0, 9)) else KEYS
        key = data.draw(st.sampled_from(pool))
        if kind == "delete":
            changes.append(Delete(key))
            running.discard(key)
        else:
            changes.append(Patch(key, labels={"class": data.draw(st.sampled_from(["cat", None]))}))
    return changes


def model_apply(state: dict[str, Record], changes: list) -> dict[str, Record] | None:
    """The reference semantics; None if the change set must be refused."""
    new = dict(state)
    for change in changes:
        if isinstance(change, Put):
            new[change.record.key] = change.record
        elif change.key not in new:
            return None
        elif isinstance(change, Delete):
            del new[change.key]
        else:
            labels = dict(new[change.key].labels)
            for name, value in change.labels.items():
                if value is None:
                    labels.pop(name, None)
                else:
                    labels[name] = value
            old = new[change.key]
            new[change.key] = Record(old.key, old.url, old.etag, old.size, old.checksum, old.meta, labels)
    return new


def change_counts(old: dict[str, Record], new: dict[str, Record]) -> tuple[int, int, int]:
    added = len(new.keys() - old.keys())
    removed = len(old.keys() - new.keys())
    return added, removed, sum(1 for k in old.keys() & new.keys() if old[k] != new[k])


def apply_diff(state: dict[str, Record], entries) -> dict[str, Record]:
    out = dict(state)
    for e in entries:
        if e.kind == "removed":
            assert out.pop(e.key) == e.old
        elif e.kind == "added":
            assert e.key not in out
            out[e.key] = e.new
        else:
            assert out[e.key] == e.old and e.old != e.new
            out[e.key] = e.new
    return out


def check_against_model(kind: str, data: st.DataObject) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="catalog-prop-"))
    store = make_store(kind, tmp, batch_size=3, page_size=2)
    cat = Catalog(store)
    try:
        cat.create_dataset("ds")
        versions: list[dict[str, Record]] = [{}]  # index = seq; 0 = empty
        tags: dict[str, int] = {}
        for _ in range(data.draw(st.integers(1, 12), label="operations")):
            if data.draw(st.integers(0, 3)):  # commit three times as often as tag
                arg = draw_changes(data, versions[-1])
                expected = model_apply(versions[-1], arg)
                if expected is None:
                    try:
                        cat.commit("ds", arg)
                    except RecordNotFound:
                        continue
                    raise AssertionError("a change set touching a missing key was accepted")
                if not arg:  # an empty change set makes no version
                    try:
                        cat.commit("ds", arg)
                    except NoChanges:
                        continue
                    raise AssertionError("an empty change set made a version")
                v = cat.commit("ds", arg)
                assert v.seq == len(versions) and v.record_count == len(expected)
                assert (v.added, v.removed, v.modified) == change_counts(versions[-1], expected)
                assert v.total_bytes == sum(r.size for r in expected.values())
                versions.append(expected)
            else:
                name = data.draw(st.sampled_from(TAGS))
                target = data.draw(st.integers(0, len(versions)))
                if 1 <= target < len(versions):
                    cat.tag("ds", name, target)
                    tags[name] = target
        for seq in range(1, len(versions)):
            listed = list(cat.list_records("ds", seq))
            assert [r.key for r in listed] == sorted(versions[seq])
            assert {r.key: r for r in listed} == versions[seq]
            assert [r.key for r in cat.list_records("ds", seq, prefix="b")] == sorted(
                k for k in versions[seq] if k.startswith("b")
            )
        for name, target in tags.items():
            assert cat.resolve("ds", name).seq == target
        for a in range(len(versions)):
            for b in range(len(versions)):
                entries = list(cat.diff("ds", a, b))
                assert [e.key for e in entries] == sorted({e.key for e in entries})  # key order, no dups
                assert apply_diff(versions[a], entries) == versions[b]
    finally:
        cat.close()
        shutil.rmtree(tmp, ignore_errors=True)


PROPERTY_SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


@PROPERTY_SETTINGS
@given(st.data())
def test_sqlite_agrees_with_model(data: st.DataObject) -> None:
    check_against_model("sqlite", data)


@PROPERTY_SETTINGS
@given(st.data())
def test_mongomock_agrees_with_model(data: st.DataObject) -> None:
    check_against_model("mongomock", data)
