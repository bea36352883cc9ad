"""Random workspace histories against the three-way commit rules, with failures injected.

    .venv/bin/python -m tests.writeback.commit_fuzz FIRST_SEED LAST_SEED [--steps 25] [--verbose]

review19a; not collected by pytest (a few seconds a seed): run it after changing
``datahub.commit_base`` or ``datahub.workspaces``. Each seed writes, deletes and renames files
of a real workspace (local stores, a real journal), lets another writer of the SQLite catalog
put, delete and label the same keys and others between commits, and commits the workspace
with one of these injected at random: nothing; the catalog commit failing before it lands; it
landing and its reply lost; a crash (an exception) inside ``Base.expect`` or ``Base.settle``
after 0-2 of their transactions. The batch is 3 keys, so every store crosses batches. After
each commit that returns, every key is checked against docs/writeback.md ("A commit applies
the workspace's changes"): a file the workspace changed since its last successful commit is
the head's; one it left unchanged keeps the head's change since (or, after a failed commit
whose outcome the journal never learned, may be put again); one it deleted is gone unless
someone changed or labeled it; other writers' keys are untouched. Prints the first broken
rule of a seed and exits 1 if any seed broke one. It found review19a's lost file (a delete
whose reply was lost hid the same file written again: ``Writes.note``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

from datahub import commit_base
from datahub.catalog import Catalog, Delete, Patch, Put, Record, open_catalog
from datahub.errors import DatasetNotFound, VersionNotFound
from datahub.workspaces import commit_workspace
from tests.writeback.conftest import make_env, write

DATASET = "fuzz"
FAULTS = ("none", "none", "before", "after", "expect", "settle")


class Crash(Exception):
    """An injected failure (the process dying, or a commit's reply lost)."""


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _head(catalog) -> dict[str, Record]:
    try:
        return {r.key: r for r in catalog.list_records(DATASET)}
    except (DatasetNotFound, VersionNotFound):
        return {}


def _faulty(stack: ExitStack, fault: str, limit: int) -> None:
    """Patch the catalog commit and the base's stores to fail as ``fault`` says."""
    landed, store = Catalog.commit, commit_base.Base._write
    phase = {"now": "expect", "writes": 0}

    def commit(self, *args, **kwargs):
        if fault == "before":
            raise Crash("the catalog commit failed")
        version = landed(self, *args, **kwargs)
        phase["now"] = "settle"
        if fault == "after":
            raise Crash("the catalog commit landed and its reply was lost")
        return version

    def write(self, entries, drop_old=False):
        if phase["now"] == fault:
            if phase["writes"] >= limit:
                raise Crash(f"killed in {fault}")
            phase["writes"] += 1
        return store(self, entries, drop_old)

    stack.enter_context(mock.patch.object(Catalog, "commit", commit))
    stack.enter_context(mock.patch.object(commit_base.Base, "_write", write))


class Model:
    """What the rules allow the head to hold at each workspace key after a commit returns."""

    def __init__(self) -> None:
        self.committed: dict[str, bytes] = {}  # the workspace's files at its last successful commit
        self.theirs: dict[str, str | None] = {}  # keys another writer changed since (None: deleted)
        self.head: dict[str, str] = {}  # workspace keys' checksums after that commit
        self.labeled: set[str] = set()  # ... and which of them carried others' labels
        self.failed = False  # a commit failed since

    def allowed(self, key: str, files: dict[str, bytes]) -> set[str | None]:
        mine = _sha(files[key]) if key in files else None
        changed = files.get(key) != self.committed.get(key)
        if key in self.theirs and not changed:  # theirs stands, or is put over after a lost outcome
            return {self.theirs[key]} | ({mine} if self.failed else set())
        if key in self.theirs and mine is None:  # deleted by the workspace, changed by them: kept
            return {self.theirs[key]} | ({None} if self.failed else set())
        if mine is None and changed:  # deleted by the workspace: gone, unless it was someone's
            ours = key in self.committed and self.head.get(key) == _sha(self.committed[key])
            kept = {None} if ours and key not in self.labeled else {self.head.get(key)}
            return kept | ({None} if self.failed else set())
        if changed:  # a failed commit may have landed and settled it before their change
            return {mine} | ({self.theirs[key]} if self.failed and key in self.theirs else set())
        return {self.head.get(key)} | ({mine} if self.failed else set())

    def succeeded(self, files: dict[str, bytes], head: dict[str, Record]) -> None:
        self.committed, self.theirs, self.failed = dict(files), {}, False
        self.head = {k: r.checksum for k, r in head.items() if k.startswith("k")}
        self.labeled = {k for k, r in head.items() if r.labels}


def run(seed: int, steps: int, verbose: bool) -> str | None:
    """One random history; the first broken rule, or None."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="commit-fuzz-") as tmp:
        env = make_env(Path(tmp))
        catalog = open_catalog(f"sqlite:///{tmp}/catalog.db")
        objects = env.stores.store(env.config.resolved_objects_url)
        ws = env.open()
        files: dict[str, bytes] = {}
        others: dict[str, str] = {}  # keys only the other writer has
        model = Model()

        def other_put(key: str) -> str:
            data = f"theirs {key} {rng.random()}".encode()
            name = f"imported/{hashlib.md5(data).hexdigest()}"
            info = objects.put(name, io.BytesIO(data), len(data))
            if DATASET not in {d.name for d in catalog.list_datasets()}:
                catalog.create_dataset(DATASET)
            record = Record(key, objects.url_for(name), info.etag, len(data), checksum=_sha(data))
            catalog.commit(DATASET, [Put(record)], message="another writer")
            return _sha(data)

        try:
            for step in range(steps):
                for _ in range(rng.randint(1, 6)):
                    key, roll = f"k{rng.randint(0, 14):02d}", rng.random()
                    if roll < 0.5 or not files:
                        files[key] = f"{key} {rng.randint(0, 3)}".encode()
                        write(ws, key, files[key])
                    elif roll < 0.75:
                        gone = rng.choice(sorted(files))
                        ws.unlink(gone)
                        del files[gone]
                    elif key not in files:
                        moved = rng.choice(sorted(files))
                        ws.rename(moved, key)
                        files[key] = files.pop(moved)
                if rng.random() < 0.3:
                    other = f"other{rng.randint(0, 5)}"
                    others[other] = other_put(other)
                if rng.random() < 0.4:
                    key, head, roll = f"k{rng.randint(0, 14):02d}", _head(catalog), rng.random()
                    if key in head and roll < 0.3:
                        catalog.commit(DATASET, [Patch(key, labels={"seen": roll})], message="a label")
                        model.theirs[key] = head[key].checksum
                    elif key in head and roll < 0.6:
                        catalog.commit(DATASET, [Delete(key)], message="a delete")
                        model.theirs[key] = None
                    else:
                        model.theirs[key] = other_put(key)
                fault, limit = rng.choice(FAULTS), rng.randint(0, 2)
                with ExitStack() as stack:
                    _faulty(stack, fault, limit)
                    try:
                        commit_workspace(ws, catalog, DATASET)
                    except Crash:
                        model.failed = True
                        continue
                head = _head(catalog)
                if verbose:
                    print(f"step {step}: {fault} {limit}, files {sorted(files)}, head {sorted(head)}")
                if {k: r.checksum for k, r in head.items() if not k.startswith("k")} != others:
                    return f"seed {seed} step {step}: another writer's keys changed"
                for key in sorted(set(files) | model.theirs.keys() | {k for k in head if k.startswith("k")}):
                    got = head[key].checksum if key in head else None
                    if got not in model.allowed(key, files):
                        return f"seed {seed} step {step}: {key} is {got}, allowed {model.allowed(key, files)}"
                model.succeeded(files, head)
        finally:
            ws.close()
            catalog.close()
            env.close()
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("first", type=int)
    ap.add_argument("last", type=int, help="exclusive")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    broken = 0
    with mock.patch.object(commit_base, "BATCH", 3):
        for seed in range(args.first, args.last):
            found = run(seed, args.steps, args.verbose)
            print(found or f"seed {seed}: held", flush=True)
            broken += found is not None
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
