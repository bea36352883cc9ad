"""The Catalog facade: what the API, CLI, importer and LabelX call.

It wraps one CatalogStore and adds what every store would otherwise repeat: validation of
user input (names, keys, tags, roles — promise 4), resolution of version references
(``3``, ``"3"``, ``"v3"``, a tag, ``"latest"``/``None``), diff in either direction, and
``derive``. Stores stay small and only speak sequence numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from inspect import GEN_CREATED, getgeneratorstate
from operator import attrgetter
from typing import Any

from datahub.catalog.batch_checks import plain_puts
from datahub.catalog.descriptions import copyable
from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import (
    ROLES,
    Change,
    Dataset,
    Delete,
    DiffEntry,
    Patch,
    Put,
    Record,
    Version,
    readers_of,
)
from datahub.catalog.put_lines import PutLines, batches, expanded
from datahub.catalog.revisions import ChangeDigest
from datahub.catalog.sources import check_sources
from datahub.catalog.store import CatalogStore
from datahub.errors import AlreadyExists, DatasetNotFound, InvalidInput, NoChanges, StaleBase, VersionNotFound
from datahub.storage import check_record_fields
from datahub.validation import (
    MAX_SEQ,
    check_json_field,
    check_key,
    check_name,
    check_new_key,
    check_owner,
    check_prefix,
    check_tag,
    check_text,
    is_ref,
    not_a_version,
    version_number,
)

Ref = str | int | None
# "-1": no such version, never "invalid tag" (no tag starts with "-"). ASCII digits only: \\d and
# int() take any script's digits, so "v\u09ea" (a Bengali 4, drawn like an 8) read version 4 through the
# API, the browser and datahub:// while the CLI refused it (validation.is_ref; review73)
_SEQ = re.compile(r"v?([0-9]+)|(-[0-9]+)")
_DATASET_FIELDS = ("description", "source", "owner", "acl", "sources")
_HEAD_RETRIES = 3  # commits "on the head" that lose a race before reading any change


def first_version(dataset: str) -> str:
    """How version 1 of ``dataset`` is made, as the commands a new user types (the CLI and the
    browser show each command in backticks as this user runs datahub)."""
    return f"`datahub import SRC --to {dataset}` or `datahub commit {dataset} --changes FILE.jsonl`"


def no_versions_yet(dataset: str, ref: Ref) -> VersionNotFound:
    """The error for a version asked of a dataset that has none: it says how the first is made."""
    return VersionNotFound(
        f"dataset {dataset!r} has no versions yet: create version 1 with {first_version(dataset)}",
        dataset=dataset,
        version="latest" if ref is None else str(ref)[:40],
    )


class Catalog:
    """Datasets, immutable versions and their records, on any CatalogStore."""

    def __init__(self, store: CatalogStore) -> None:
        self.store = store

    # --- datasets -------------------------------------------------------------------------------
    def create_dataset(
        self,
        name: str,
        description: str = "",
        source: str = "",
        owner: str = "",
        acl: Mapping[str, str] | None = None,
    ) -> Dataset:
        check_name(name)
        for what, text in (("description", description), ("source", source), ("owner", owner)):
            check_text(text, f"{what} of dataset {name!r}:")
        return self.store.create_dataset(
            Dataset(name, description, source, owner, _check_acl(name, acl or {}))
        )

    def get_dataset(self, name: str) -> Dataset:
        return self.store.get_dataset(check_name(name))

    def list_datasets(self) -> list[Dataset]:
        return list(self.store.list_datasets())

    def update_dataset(self, name: str, /, expected_revision: int | None = None, **fields: Any) -> Dataset:
        """Change description, source, owner, acl and/or sources; other fields are refused.

        Only the fields given are written, in one atomic store update, so concurrent edits
        of different fields never undo each other. ``expected_revision`` (HTTP ``If-Match``)
        makes it conditional: PreconditionFailed if the dataset changed since it was read.
        """
        unknown = sorted(set(fields) - set(_DATASET_FIELDS))
        if unknown:
            raise InvalidInput(
                f"cannot update {', '.join(unknown)} of dataset {name!r}: only "
                f"{', '.join(_DATASET_FIELDS)} can change",
                dataset=name,
            )
        check_name(name)
        if "acl" in fields:
            fields["acl"] = _check_acl(name, fields["acl"] or {})
        if "owner" in fields:
            check_owner(fields["owner"], name)
        if "sources" in fields:
            fields["sources"] = check_sources(fields["sources"] or (), name)
        for what in ("description", "source"):
            check_text(fields.get(what, ""), f"{what} of dataset {name!r}:")
        if not fields and expected_revision is None:
            return self.get_dataset(name)
        return self.store.update_dataset(name, fields, expected_revision=expected_revision)

    # --- versions -------------------------------------------------------------------------------
    def resolve(self, dataset: str, ref: Ref = None) -> Version:
        """The version a reference names: 3, "3", "v3", a tag, or "latest"/None for the head."""
        check_name(dataset)
        if ref is None or ref == "latest":
            head = self.store.head(dataset)
            if head == 0:
                raise no_versions_yet(dataset, "latest")
            return self.store.get_version(dataset, head)
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise InvalidInput(f"invalid version reference {ref!r} for dataset {dataset!r}", dataset=dataset)
        m = None if isinstance(ref, int) else _SEQ.fullmatch(ref)
        if isinstance(ref, int) or m:
            seq = ref if isinstance(ref, int) else version_number(m[1] or m[2])  # type: ignore[index]
            if not 0 < seq <= MAX_SEQ:  # beyond the stores' 64-bit integers: no such version
                self.get_dataset(dataset)
                shown = (
                    str(ref) if len(str(ref)) <= 40 else f"{str(ref)[:20]}... ({len(str(ref))} characters)"
                )
                raise VersionNotFound(
                    f"dataset {dataset!r} has no version {shown}; versions are numbered 1, 2, 3 ...",
                    dataset=dataset,
                    version=str(ref)[:40],
                )
            return self._or_no_versions(dataset, ref, lambda: self.store.get_version(dataset, seq))
        if not is_ref(ref):  # "@v1" of sample@@v1 was "invalid tag '@v1'" (newuser72)
            raise not_a_version(dataset, ref)
        check_tag(ref, existing=True)  # a tag stored before a rule (``V3``) still resolves
        return self._or_no_versions(
            dataset, ref, lambda: self.store.get_version(dataset, self.store.tag_target(dataset, ref))
        )

    def _or_no_versions(self, dataset: str, ref: Ref, get: Callable[[], Version]) -> Version:
        """``get()``; a version or tag not found in a dataset with none at all says that.

        Why: on a dataset just created, ``datahub ls x@v1`` and ``datahub diff x 0 1`` said
        "has no version 1; see `datahub log x`", and that log printed "(none)": a loop that
        never said how a first version is made (newuser42)."""
        try:
            return get()
        except VersionNotFound:
            if self.store.head(dataset) == 0:
                raise no_versions_yet(dataset, ref) from None
            raise

    def _seq(self, dataset: str, ref: Ref) -> int:
        """Like resolve, but 0 (or "0"/"v0") names the empty state before version 1."""
        if ref in (0, "0", "v0"):
            self.get_dataset(dataset)
            return 0
        return self.resolve(dataset, ref).seq

    def commit(
        self,
        dataset: str,
        changes: Iterable[Change | PutLines],
        *,
        base: int | None = None,
        message: str = "",
        author: str = "",
        lineage: Mapping[str, Any] | None = None,
        commit_id: str | None = None,
    ) -> Version:
        """Create the next version from ``base`` (None = head) plus ``changes``, all or nothing.

        ``changes`` is consumed lazily; an invalid change (or an exception from the caller's
        generator) at item N aborts the commit with nothing written.
        """
        check_name(dataset)
        for what, text in (("commit message", message), ("author", author), ("commit id", commit_id or "")):
            check_text(text, f"{what} for dataset {dataset!r}:")
        if base is not None and not 0 <= base <= MAX_SEQ:
            raise InvalidInput(f"invalid base version {base} for dataset {dataset!r}", dataset=dataset)
        validated = validated_changes(dataset, changes)
        # chunks of checked put lines (``datahub commit --changes``) go to a store that writes
        # them as they are; any other store gets the same puts as objects
        flat = validated if self.store.takes_put_lines else expanded(validated)
        # with a commit id, the store keeps the change set's digest: a retry must send the same changes
        consumed = flat if commit_id is None else ChangeDigest(flat)
        for attempt in range(_HEAD_RETRIES + 1):
            try:
                with self.store.commit_turn(dataset):  # the head read below stays the head
                    return self.store.commit(
                        dataset,
                        self.store.head(dataset) if base is None else base,
                        consumed,
                        message=message,
                        author=author,
                        lineage=dict(lineage) if lineage else None,
                        commit_id=commit_id,
                    )
            except StaleBase:
                # "On the head" means the head when the commit runs: if another commit won the
                # race before a single change was read, committing on the new head is safe.
                if (
                    base is not None
                    or attempt == _HEAD_RETRIES
                    or getgeneratorstate(validated) != GEN_CREATED
                ):
                    raise
        raise AssertionError("unreachable")

    def log(self, dataset: str) -> Iterator[Version]:
        """Versions newest first."""
        return self.store.list_versions(check_name(dataset))

    def tag(self, dataset: str, tag: str, ref: Ref) -> Version:
        """Point ``tag`` at a version (moving it if it pointed elsewhere)."""
        check_tag(tag)
        version = self.resolve(dataset, ref)
        self.store.set_tag(dataset, tag, version.seq)
        return self.store.get_version(dataset, version.seq)

    def untag(self, dataset: str, tag: str) -> None:
        self.store.delete_tag(check_name(dataset), check_tag(tag, existing=True))

    # --- records --------------------------------------------------------------------------------
    def list_records(
        self,
        dataset: str,
        ref: Ref = None,
        *,
        prefix: str = "",
        start_after: str = "",
        limit: int | None = None,
        where: str | RecordFilter | None = None,
    ) -> Iterator[Record]:
        """A version's records in key order, streamed; ``start_after`` is the cursor."""
        check_prefix(prefix)
        if limit is not None and limit < 0:
            raise InvalidInput(f"invalid limit {limit}: use a number >= 0", limit=limit)
        seq = self.resolve(dataset, ref).seq
        filt = RecordFilter.parse(where) if isinstance(where, str) else where
        return self.store.list_records(
            dataset, seq, prefix=prefix, start_after=start_after, limit=limit, where=filt
        )

    def list_keys(self, dataset: str, ref: Ref = None) -> Iterator[str]:
        """A version's keys in key order, streamed: ``list_records`` for a caller that needs
        the keys alone (``CatalogStore.list_keys``: the SQLite store reads no more)."""
        return self.store.list_keys(dataset, self.resolve(dataset, ref).seq)

    def list_directory(
        self,
        dataset: str,
        ref: Ref = None,
        *,
        prefix: str = "",
        start_after: str = "",
        limit: int | None = None,
    ) -> Iterator[Record | str]:
        """One directory level of a version (``CatalogStore.list_directory``): its records and
        its subdirectories as ``prefix + name + "/"``, in key order, streamed."""
        check_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            raise InvalidInput(
                f"invalid directory {prefix!r}: a directory prefix ends with '/'", prefix=prefix
            )
        if limit is not None and limit < 0:
            raise InvalidInput(f"invalid limit {limit}: use a number >= 0", limit=limit)
        seq = self.resolve(dataset, ref).seq
        return self.store.list_directory(dataset, seq, prefix=prefix, start_after=start_after, limit=limit)

    def get_record(self, dataset: str, ref: Ref, key: str) -> Record:
        check_key(key)
        return self.store.get_record(dataset, self.resolve(dataset, ref).seq, key)

    def lookup_records(self, dataset: str, ref: Ref, keys: Iterable[str]) -> dict[str, Record]:
        """The records present among ``keys`` (absent keys are simply missing from the result).

        For a handful of keys; to compare a whole listing, merge ``list_records`` instead.
        """
        wanted = [check_key(k) for k in keys]
        return self.store.get_records(dataset, self.resolve(dataset, ref).seq, wanted)

    def diff(
        self, dataset: str, from_ref: Ref, to_ref: Ref, *, prefix: str = "", start_after: str = ""
    ) -> Iterator[DiffEntry]:
        """Changes turning ``from_ref`` into ``to_ref``, in key order (0 names the empty state),
        from the first key above ``start_after`` on (a page's cursor)."""
        check_prefix(prefix)
        a, b = self._seq(dataset, from_ref), self._seq(dataset, to_ref)
        if a == b:
            return iter(())
        if a < b:
            return self.store.diff(dataset, a, b, prefix=prefix, start_after=start_after)
        return (_reversed(e) for e in self.store.diff(dataset, b, a, prefix=prefix, start_after=start_after))

    def derive(
        self,
        dataset: str,
        ref: Ref,
        where: str | RecordFilter,
        *,
        to_dataset: str | None = None,
        message: str = "",
        author: str = "",
        owner: str = "",
        may_write: Callable[[Dataset], None] | None = None,
    ) -> Version:
        """Commit the records of ``dataset@ref`` matching ``where`` as a new version.

        The target is ``dataset`` itself or ``to_dataset``. A missing ``to_dataset`` is created
        under the same rule as ``create_dataset``: owned by ``owner``, with an empty access
        list, and nothing of the source's owner or ACL copied (or a reader of the source could
        mint a dataset that the source's admins control). With no ``owner`` (a CLI derive on
        the deployment's catalog) it starts with the source's readers as its readers
        (``readers_of``): with neither an owner nor an access list it was open to every pod. ``may_write`` is called with an
        existing target (including one created concurrently by someone else) so a server can
        refuse callers without the writer role. A derive that would change nothing, or whose
        filter matches no record, is refused with NoChanges, and creates no dataset and no
        version (newuser22: a typo in a filter emptied the head of the dataset itself).
        """
        source = self.resolve(dataset, ref)
        filt = RecordFilter.parse(where) if isinstance(where, str) else where
        if filt is None:
            raise InvalidInput("derive needs a filter such as labels.class=cat", dataset=dataset)
        target = dataset if to_dataset is None else check_name(to_dataset)
        # "latest" of the target itself: the version filtered must be the base committed on, or a
        # commit landing between the two reads was reverted by this one (catalog43)
        follows_head = target == dataset and (ref is None or ref == "latest")
        for attempt in range(_HEAD_RETRIES + 1):
            if attempt:
                source = self.resolve(dataset, ref)
            wanted = _Peekable(self.store.list_records(dataset, source.seq, where=filt))
            existing = self._derive_target(dataset, target, owner, wanted_any=wanted.peek)
            if existing is not None and may_write is not None:
                may_write(existing)
            if existing is not None and not wanted.peek():
                # a filter with a typo matched nothing: committing it would empty the target's
                # head (the version LabelX commits onto and @latest reads), as a new target is
                # never made
                raise NoChanges(
                    f"no record of dataset {dataset!r}@v{source.seq} matches the filter {str(filt)!r}; "
                    f"nothing was committed to {target!r} (a derive never empties a dataset: check the "
                    "filter, or remove records with `datahub commit --changes`)",
                    dataset=target,
                )
            head = source.seq if follows_head else self.store.head(target)
            current = self.store.list_records(target, head) if head else iter(())
            described = f"{dataset}@v{source.seq} where {filt}"
            changes = _nonempty(changes_between(current, wanted), target, described)
            try:
                return self.store.commit(
                    target,
                    head,
                    changes,
                    message=message or f"derive {described}",
                    author=author,
                    lineage={"derived_from": f"{dataset}@v{source.seq}", "filter": str(filt)},
                )
            except StaleBase:
                # another commit made the target's next version first, before a change of this
                # one was read: a derive names no base, so it starts again on the new head (as
                # a commit "on the head" does), never reverting what that commit wrote
                if attempt == _HEAD_RETRIES or getgeneratorstate(changes) != GEN_CREATED:
                    raise
        raise AssertionError("unreachable")

    def _derive_target(
        self, dataset: str, target: str, owner: str, wanted_any: Callable[[], bool]
    ) -> Dataset | None:
        """The existing target dataset, or None once a missing one has been created.

        A missing target is created only if the filter matches something, so an empty
        derive leaves no empty dataset behind.
        """
        if target == dataset:
            return self.store.get_dataset(target)
        try:
            return self.store.get_dataset(target)
        except DatasetNotFound:
            pass
        if not wanted_any():
            raise NoChanges(
                f"no record of dataset {dataset!r} matches the filter; {target!r} was not created",
                dataset=dataset,
            )
        src = self.get_dataset(dataset)
        # no owner (a CLI derive on the deployment's catalog): the source's readers, not every
        # pod (``readers_of``); an owner's target copies nothing (see ``derive``)
        acl = None if owner else readers_of(src, target)
        try:
            # the copied description names no other dataset (an old pack target's did): the
            # target's readers need not read it (datahub.catalog.descriptions)
            self.create_dataset(target, copyable(src.description), src.source, owner, acl)
        except AlreadyExists:
            return self.store.get_dataset(target)
        return None

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_acl(dataset: str, acl: Mapping[str, str]) -> dict[str, str]:
    for principal, role in acl.items():
        if not isinstance(principal, str) or not principal or role not in ROLES:
            raise InvalidInput(
                f"invalid access entry {principal!r}: {role!r} for dataset {dataset!r}; "
                f"roles are {', '.join(ROLES)}",
                dataset=dataset,
            )
    return dict(acl)


def validated_changes(dataset: str, changes: Iterable[Change | PutLines]) -> Iterator[Change | PutLines]:
    """Check every change as the store consumes it, so a bad one aborts the whole commit.

    This is the one validation point of every write path (API, CLI, import, LabelX, pack all
    commit through ``Catalog.commit``). An empty change set is refused the same way: it would
    create a version identical to its parent. Changes are read ``CHECK_CHUNK`` at a time: a
    chunk of plain puts is checked by C-level passes over its columns
    (``batch_checks.plain_puts``; in a chunk of puts and other changes, its puts when they all
    pass), any other change one by one, which names the bad one;
    a ``PutLines`` chunk was checked line by line when it was built and passes as it is.
    """
    n = 0
    for chunk in batches(changes, CHECK_CHUNK):
        if isinstance(chunk, PutLines):  # every line was checked when the chunk was built (put_lines)
            n += len(chunk)
            yield chunk
            continue
        if plain_puts(chunk) is None:
            # A chunk of puts with deletes among them (a bucket snapshot's merge, a sync): its
            # puts still go through the column passes when they all pass, and only the other
            # changes one by one (a snapshot of 10^5 keys spent a sixth of its commit here)
            puts = [c for c in chunk if type(c) is Put]
            skip_puts = 0 < len(puts) < len(chunk) and plain_puts(puts) is not None
            for i, change in enumerate(chunk, n + 1):
                if not (skip_puts and type(change) is Put):
                    _check_change(dataset, i, change)
        n += len(chunk)
        yield from chunk
    if n == 0:
        raise NoChanges(
            f"no changes: the change set for dataset {dataset!r} is empty; no version created",
            dataset=dataset,
        )


CHECK_CHUNK = 2000  # changes checked at once (bounded memory: one chunk ahead of the store)


def _check_change(dataset: str, n: int, change: Change) -> None:
    """The checks of change number ``n``, raising InvalidInput that names it and its key."""
    if isinstance(change, Put):
        r = change.record
        check_new_key(r.key)
        try:
            check_record_fields(r.url, r.etag, r.size, r.key)
            check_json_field(r.meta, "meta", r.key)
            check_json_field(r.labels, "labels", r.key)
        except InvalidInput as exc:
            raise InvalidInput(f"change {n} for dataset {dataset!r}: {exc.message}", key=r.key) from None
    elif isinstance(change, Delete | Patch):
        check_key(change.key)
        if isinstance(change, Patch):
            try:
                check_json_field(change.meta, "meta", change.key)
                check_json_field(change.labels, "labels", change.key)
            except InvalidInput as exc:
                raise InvalidInput(
                    f"change {n} for dataset {dataset!r}: {exc.message}", key=change.key
                ) from None
    else:
        raise InvalidInput(
            f"change {n} for dataset {dataset!r} is a {type(change).__name__}; use Put, Delete or Patch"
        )


def changes_between(
    current: Iterator[Record], wanted: Iterable[Record], *, put_unchanged: bool = False
) -> Iterator[Change]:
    """Changes turning the listing ``current`` into ``wanted``, both in key order (a streaming
    merge: one record of each side held, whatever their sizes).

    ``put_unchanged`` puts every record of ``wanted``, equal or not (a bucket snapshot's
    version is its listing, put whole: ``listing_changes``, which needs only ``current``'s
    keys); otherwise only the records that differ. ``wanted`` out of key order would delete
    keys it holds, so it is refused with InvalidInput, which rolls the caller's commit back."""
    return _merged(current, _KEY_OF, wanted, put_unchanged)


def listing_changes(current_keys: Iterator[str], wanted: Iterable[Record]) -> Iterator[Change]:
    """``changes_between(current, wanted, put_unchanged=True)`` from ``current``'s keys alone
    (``Catalog.list_keys``): every record of ``wanted`` put, every key of ``current`` it
    lacks deleted. Why keys: the records of ``current`` were read, decoded and dropped unused."""
    return _merged(current_keys, str, wanted, True)


_KEY_OF = attrgetter("key")


def _merged(
    current: Iterator[Any], key_of: Callable[[Any], str], wanted: Iterable[Record], put_unchanged: bool
) -> Iterator[Change]:
    source = iter(wanted)
    cur, want = next(current, None), next(source, None)
    while cur is not None or want is not None:
        if want is None or (cur is not None and key_of(cur) < want.key):
            yield Delete(key_of(cur))
            cur = next(current, None)
            continue
        if cur is None or want.key < key_of(cur):
            yield Put(want)
        else:
            if put_unchanged or cur != want:
                yield Put(want)
            cur = next(current, None)
        following = next(source, None)
        if following is not None and following.key <= want.key:
            raise InvalidInput(
                f"a listing is not in key order: {following.key!r} after {want.key!r}; no version created",
                key=following.key,
            )
        want = following


def _reversed(entry: DiffEntry) -> DiffEntry:
    kind = {"added": "removed", "removed": "added"}.get(entry.kind, entry.kind)
    return DiffEntry(kind, entry.key, entry.new, entry.old)  # type: ignore[arg-type]


class _Peekable(Iterator[Record]):
    """An iterator whose first item can be looked at without losing it."""

    def __init__(self, it: Iterator[Record]) -> None:
        self._it = it
        self._head: list[Record] = []

    def peek(self) -> bool:
        if not self._head:
            nxt = next(self._it, None)
            if nxt is None:
                return False
            self._head.append(nxt)
        return True

    def __next__(self) -> Record:
        if self._head:
            return self._head.pop()
        return next(self._it)


def _nonempty(changes: Iterator[Change], dataset: str, described: str) -> Iterator[Change]:
    """Pass changes through; refuse (inside the store's transaction) if there were none."""
    n = 0
    for n, change in enumerate(changes, 1):  # noqa: B007 - n counts
        yield change
    if n == 0:
        raise NoChanges(
            f"no changes: dataset {dataset!r} already holds exactly the records of {described}; "
            "no version created",
            dataset=dataset,
        )
