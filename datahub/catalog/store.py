"""The catalog store contract; SQLite (embedded default) and MongoDB implement it.

Snapshots cost O(changes): each record revision carries the half-open sequence range in
which it is live (``from_seq <= v < to_seq``). A commit closes the ranges of the records
it replaces or deletes and inserts new revisions, so it writes rows in proportion to the
change set; a version listing is a range query in key order; a diff between two versions
only looks at revisions whose range boundary lies between them.

Every store passes the same conformance suite (``tests/catalog/test_conformance.py``).
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from datahub.catalog.filter import RecordFilter
from datahub.catalog.leases import (
    LIST_PAGE,
    PRUNE_LAPSED,
    Lease,
    LeaseChange,
    broken,
    check_request,
    decide,
    released,
    renewed,
)
from datahub.catalog.model import (
    BrowserSession,
    Change,
    Dataset,
    DiffEntry,
    DirFile,
    Record,
    TokenInfo,
    Version,
    dir_file,
)
from datahub.catalog.record_json import record_json
from datahub.errors import InvalidInput, PreconditionFailed, RecordNotFound, StaleBase
from datahub.validation import MAX_KEY_BYTES

_first = operator.itemgetter(0)


class CatalogStore(abc.ABC):
    # Whether ``commit`` takes ``put_lines.PutLines`` chunks among its changes (the SQLite store
    # inserts them from their text); the Catalog hands any other store the same puts as objects.
    takes_put_lines = False

    # --- datasets -------------------------------------------------------------------------------
    @abc.abstractmethod
    def create_dataset(self, dataset: Dataset) -> Dataset:
        """AlreadyExists if the name is taken."""

    @abc.abstractmethod
    def get_dataset(self, name: str) -> Dataset:
        """DatasetNotFound naming ``name`` if absent."""

    @abc.abstractmethod
    def list_datasets(self) -> Iterator[Dataset]:
        """All datasets in name order."""

    @abc.abstractmethod
    def update_dataset(
        self, name: str, fields: Mapping[str, Any], *, expected_revision: int | None = None
    ) -> Dataset:
        """Set only ``fields`` (of description/source/owner/acl) and bump the revision, atomically.

        Never a read-merge-write: a concurrent update of other fields (say an ACL revocation
        racing a description edit) must not be undone. PreconditionFailed (nothing written)
        when ``expected_revision`` is given and is not the current revision. Returns the
        dataset as this update left it.
        """

    # --- versions -------------------------------------------------------------------------------
    @abc.abstractmethod
    def commit(
        self,
        dataset: str,
        base: int,
        changes: Iterable[Change],
        *,
        message: str = "",
        author: str = "",
        lineage: dict | None = None,
        commit_id: str | None = None,
    ) -> Version:
        """Create version ``base + 1`` from ``base`` (0 = empty) plus ``changes``, atomically.

        StaleBase if ``base`` is not the dataset's head, and nothing is written.
        ``changes`` may be a generator of millions of items: consume it in batches.
        A Patch or Delete of a key absent from ``base`` raises RecordNotFound (nothing written).
        ``commit_id`` makes the commit idempotent: retrying the same id returns the version
        that id created instead of committing twice.
        """

    def commit_turn(self, dataset: str) -> contextlib.AbstractContextManager[None]:
        """Hold the store's write turn around "read the head, then commit on it", for a store
        whose commits take turns (SQLite: one writer per file), so a commit on the head waits
        its turn instead of losing a race to a commit that started earlier. No-op by default."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def head(self, dataset: str) -> int:
        """Newest committed sequence number, 0 if the dataset has no version yet."""

    @abc.abstractmethod
    def get_version(self, dataset: str, seq: int) -> Version:
        """VersionNotFound naming dataset and seq if absent."""

    @abc.abstractmethod
    def list_versions(self, dataset: str) -> Iterator[Version]:
        """Newest first."""

    @abc.abstractmethod
    def set_tag(self, dataset: str, tag: str, seq: int) -> None:
        """Point ``tag`` at ``seq``; a tag is unique within its dataset (moving it is allowed)."""

    @abc.abstractmethod
    def delete_tag(self, dataset: str, tag: str) -> None:
        """NotFound naming the tag if it does not exist."""

    @abc.abstractmethod
    def tag_target(self, dataset: str, tag: str) -> int:
        """Sequence number a tag points at; VersionNotFound naming the tag if unknown."""

    # --- records --------------------------------------------------------------------------------
    @abc.abstractmethod
    def list_records(
        self,
        dataset: str,
        seq: int,
        *,
        prefix: str = "",
        start_after: str = "",
        limit: int | None = None,
        where: RecordFilter | None = None,
    ) -> Iterator[Record]:
        """Records live in version ``seq``, in key order, streamed (bounded memory)."""

    def list_record_json(
        self, dataset: str, seq: int, *, prefix: str = "", start_after: str = "", limit: int | None = None
    ) -> Iterator[str]:
        """``list_records`` with each record as one JSON array (``record_json``), for writing a
        listing out again (the remote-store route). The SQLite store has SQLite write them
        from the stored rows (decoding every record and encoding it again took half of
        that route's CPU); this default encodes the records of ``list_records``."""
        records = self.list_records(dataset, seq, prefix=prefix, start_after=start_after, limit=limit)
        return map(record_json, records)

    def list_keys(self, dataset: str, seq: int) -> Iterator[str]:
        """The keys live in version ``seq``, in key order, streamed: what a merge needing no
        more of one side reads (a bucket snapshot deletes the head's keys its listing lacks
        and puts the listing whole). The SQLite store selects the key column alone (each
        record's Record and decoded meta were a fifth of a 10^5-key snapshot's commit); this
        default takes the keys of ``list_records``."""
        return (record.key for record in self.list_records(dataset, seq))

    def list_directory(
        self, dataset: str, seq: int, *, prefix: str = "", start_after: str = "", limit: int | None = None
    ) -> Iterator[DirFile | str]:
        """One directory level of version ``seq``, in key order: a DirFile for each record
        whose key is ``prefix`` + a name without ``/``, and each subdirectory once, as the
        string ``prefix + name + "/"`` (it sorts there among the keys). ``start_after`` is a
        cursor of that order (a key, or a subdirectory's string: its whole subtree is skipped).

        Why: a mount pages its namespace a directory at a time (docs/fuse.md, "The
        namespace"); ``list_records(prefix=...)`` would read every key below the directory.
        A store with a directory table (:meth:`_directory_index`) reads the subdirectories
        the level ever had from it and, between two of them, that level's own files: the
        rows of other versions' subtrees are never read (docs/catalog.md, "Directories").
        Without one this reads the directory's own rows and, per subdirectory, one row (a
        keyset seek past the subtree); that probe steps over every row between two live
        subdirectories that is not live in ``seq``. The rows come from
        :meth:`_directory_pages`, which a store overrides to select only DirFile's columns;
        the HTTP store sends the whole call as one request."""
        index = self._directory_index(dataset, seq)
        if index is not None:
            yield from _by_directory_table(*index, prefix, start_after, limit)
            return
        pages = self._directory_pages(dataset, seq)
        after = start_after
        if len(after) > len(prefix) and after.startswith(prefix) and after.endswith("/"):
            after = past_subtree(after)
        left = -1 if limit is None else limit  # entries still to send (-1: no limit)
        depth, cut = prefix.count("/"), len(prefix)
        probe = True  # after a subdirectory: one row tells what comes next
        while left:
            sub, files = "", False
            for rows in pages(prefix, after, 1 if probe else (None if left < 0 else left)):
                if not rows:
                    break
                keys = list(map(_first, rows))
                # a subdirectory's row has one "/" more than the prefix: counted in C per page
                n = len(rows)
                if "".join(keys).count("/") != depth * n:
                    n = next(i for i, key in enumerate(keys) if key.find("/", cut) >= 0)
                    sub = keys[n][: keys[n].find("/", cut) + 1]
                if left >= 0 and n > left:
                    n, sub = left, ""
                if n:
                    yield from rows[:n] if n < len(rows) else rows
                    after, left, files = keys[n - 1], left - n, True
                if sub and left:
                    yield sub
                    after, left = past_subtree(sub), left - 1
                if sub or not left or probe:
                    break
            if sub:
                probe = True
            elif probe and files:
                probe = False  # a file after a probe: stream the files that follow
            else:
                return

    def _directory_index(self, dataset: str, seq: int) -> tuple[Subdirectories, GapFiles] | None:
        """For :meth:`list_directory`, when the dataset has a complete directory table: after
        checking that the version exists, two functions. ``subdirectories(prefix, after,
        limit)``: the subdirectories of ``prefix`` above ``after`` that ANY version had, in
        order, each once, with whether it is live in ``seq``. ``files(prefix, after, before,
        limit)``: the DirFiles of the keys under ``prefix`` live in ``seq`` above ``after`` and
        below ``before`` (None: the end of the directory), at most ``limit``, a list per page.
        None (this default): no table, the level is read through :meth:`_directory_pages`."""
        return None

    def _directory_pages(
        self, dataset: str, seq: int
    ) -> Callable[[str, str, int | None], Iterator[list[DirFile]]]:
        """For :meth:`list_directory`: after checking that the version exists, a function
        ``(prefix, after, limit)`` giving the DirFiles of the live records with keys under
        ``prefix`` above ``after`` (at most ``limit`` of them), in key order, a list per page,
        read lazily. This default converts :meth:`list_records`; stores override it to
        select the columns alone."""
        self.get_version(dataset, seq)

        def pages(prefix: str, after: str, limit: int | None) -> Iterator[list[DirFile]]:
            records = self.list_records(dataset, seq, prefix=prefix, start_after=after, limit=limit)
            files = map(dir_file, records)
            size = 1 if limit == 1 else 1000
            while chunk := list(itertools.islice(files, size)):
                yield chunk

        return pages

    @abc.abstractmethod
    def get_record(self, dataset: str, seq: int, key: str) -> Record:
        """RecordNotFound naming dataset, version and key if absent."""

    @abc.abstractmethod
    def diff(
        self, dataset: str, a: int, b: int, *, prefix: str = "", start_after: str = ""
    ) -> Iterator[DiffEntry]:
        """Changes from version ``a`` to version ``b`` in key order (a may be 0 = empty), from the
        first key above ``start_after`` on: a deep page of a large diff starts where it is, instead
        of reading (and dropping) every entry before it."""

    def get_records(self, dataset: str, seq: int, keys: list[str]) -> dict[str, Record]:
        """The records among ``keys`` live in version ``seq``; stores may batch this lookup."""
        found: dict[str, Record] = {}
        for key in keys:
            try:
                found[key] = self.get_record(dataset, seq, key)
            except RecordNotFound:
                pass
        return found

    # --- API tokens -----------------------------------------------------------------------------
    @abc.abstractmethod
    def put_token(self, token: TokenInfo) -> None: ...

    @abc.abstractmethod
    def get_token(self, token_hash: str) -> TokenInfo | None: ...

    @abc.abstractmethod
    def delete_token(self, token_hash: str) -> None: ...

    @abc.abstractmethod
    def list_tokens(self) -> list[TokenInfo]:
        """Every stored token, by principal, then oldest first: so an operator finds the id of a
        token ``token create`` showed once (``datahub token list``). A token is a row per
        issued secret (a handful per principal), so one call answers them all."""

    # --- dataset browser sessions (datahub.browser.session) -------------------------------------
    @abc.abstractmethod
    def instance_id(self) -> str:
        """This catalog's id: 16 hex digits made once, when the catalog was made or upgraded.

        Why: the dataset browser names its cookies with it (``datahub.browser.session``). A
        browser keeps cookies by host, not port, so two ``datahub serve`` on one host (two
        catalogs) shared ``datahub_session``: signing in to one signed the person out of the
        other (caller73). Every server of one catalog (replicas behind one address) has the same."""

    @abc.abstractmethod
    def put_browser_session(self, session: BrowserSession, now: float) -> None:
        """Keep a sign-in; sessions that ended before ``now`` go meanwhile (none is kept past its
        end: a signed-out browser that never comes back leaves nothing)."""

    @abc.abstractmethod
    def get_browser_session(self, id_hash: str) -> BrowserSession | None: ...

    @abc.abstractmethod
    def delete_browser_session(self, id_hash: str) -> None:
        """Sign-out (``delete_token`` ends a token's sessions too)."""

    # --- writer leases (datahub.catalog.leases: the rule every store applies) ------------------
    def acquire_lease(
        self, name: str, owner: str, holder: str, ttl: float, dataset: str = "", *, bound: str | None = None
    ) -> Lease:
        """Take ``name``'s lease for ``ttl`` s if free, lapsed or ``owner``'s; Conflict otherwise.

        ``dataset``: the workspace's commit target, kept in the lease ("": keep the one it has).
        ``bound``: the target the caller's access was checked against (``leases.decide``)."""
        check_request(name, owner, holder, ttl, dataset)
        return self._lease_turn(
            f"take the writer lease of {name!r}",
            name,
            lambda cur, now: decide(cur, name, owner, holder, ttl, now, dataset, bound),
        )

    def lease(self, name: str) -> Lease | None:
        """``name``'s lease as stored now (lapsed or released ones too), None if it never had one."""
        seen: list[Lease | None] = [None]

        def read(cur: Lease | None, now: float) -> None:
            seen[0] = cur

        self._lease_turn(f"read the writer lease of {name!r}", name, read)
        return seen[0]

    def break_lease(self, name: str, dataset: str = "", *, at_once: bool = False) -> Lease | None:
        """Take ``name``'s lease from whoever holds it (``leases.broken``: free at its expiry, or
        ``at_once``), with ``dataset`` as its commit target ("": the one it has); None if it
        has none. Only for callers allowed to (the API: global admins)."""
        check_request(name, "-", "", 1, dataset)
        return self._lease_turn(
            f"break the writer lease of {name!r}", name, lambda cur, now: broken(cur, dataset, at_once, now)
        )

    def renew_lease(
        self, name: str, owner: str, epoch: int, ttl: float, *, bound: str | None = None
    ) -> Lease:
        """Extend ``owner``'s lease at ``epoch`` by ``ttl`` s from now; Conflict if it was lost, or
        if it no longer names ``bound``, the commit target the renewal was authorised for
        (``leases.renewed``: checked in the same atomic turn as the write)."""
        check_request(name, owner, "", ttl, bound or "")
        return self._lease_turn(
            f"renew the writer lease of {name!r}",
            name,
            lambda cur, now: renewed(cur, name, owner, epoch, ttl, now, bound),
        )

    def release_lease(self, name: str, owner: str, epoch: int) -> None:
        """Free the lease if it is still ``owner``'s at ``epoch`` (its epoch is kept); else nothing."""
        self._lease_turn(
            f"release the writer lease of {name!r}", name, lambda cur, now: released(cur, owner, epoch, now)
        )

    @abc.abstractmethod
    def list_leases(
        self,
        after: str = "",
        limit: int = LIST_PAGE,
        *,
        targets: Collection[str] | None = None,
        taker: str = "",
    ) -> list[Lease]:
        """The first ``limit`` leases named after ``after``, by name, lapsed, released and broken
        ones too (over the API: those the token may see); fewer only at the end, so a caller
        continues from the last name until a short page. What ``datahub lease list`` shows an
        operator, page by page. Why paged: rows go only when pruned and any token may add some,
        so one call that read them all cost the server O(every lease ever taken) (review17d).

        ``targets`` (a database store): only the leases bound to one of these datasets, and,
        with ``taker``, those whose holder ends with `` [taker]`` (``leases.taker_of``) bound to
        a dataset that does not exist: what the API lists a caller who is not a global admin,
        read through indexes (``leases.visible_page``), so a page costs what the caller may see
        and its last name is one it may see (leasefilter18)."""

    def prune_leases(
        self, after: str = "", limit: int = LIST_PAGE, lapsed_for: float = PRUNE_LAPSED
    ) -> tuple[list[str], str | None]:
        """Delete the ``prunable`` leases among the first ``limit`` named after ``after``: (the
        names deleted, the name to continue after; None: no lease follows). Bounded work per
        call, atomic per lease against a take racing it (one that changed the row keeps it).
        Why: every workspace name ever opened left a row for ever. Deleting one forgets the
        commit target it was bound to: the name is taken afresh as one never leased
        (docs/cli.md, "Writer leases"). A store that is the database does it; a server's
        client is refused (run it where the catalog is)."""
        del after, limit, lapsed_for
        raise InvalidInput(
            "pruning writer leases runs against the catalog database itself (sqlite:/// or "
            "mongodb://), not through a server; run `datahub lease prune` with --catalog set to it"
        )

    @abc.abstractmethod
    def _lease_turn(self, what: str, name: str, change: LeaseChange) -> Lease | None:
        """Read ``name``'s lease, apply ``change(current, now)`` (it may raise Conflict; None: write
        nothing) and store its result atomically against any other node's turn."""

    def caller_role(self, name: str) -> tuple[str, str] | None:
        """(principal, highest role) of the caller this store acts for on dataset ``name``, or None
        for a store that is the database itself: no caller, every write is this process's own.
        A client that writes later for someone else asks it first (the CSI plugin's commitTo)."""
        del name
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections/files."""


# --- helpers shared by the stores ---------------------------------------------------------------
# (after, before): the keys of a level above ``after`` and below ``before`` (None: to its end)
Gap = tuple[str, str | None]
Subdirectories = Callable[[str, str, int], list[tuple[str, bool]]]
GapFiles = Callable[[str, list[Gap], int | None], Iterator[list[DirFile]]]
_SUBDIRECTORY_PAGE = 256


def _by_directory_table(
    subdirectories: Subdirectories, files: GapFiles, prefix: str, after: str, limit: int | None
) -> Iterator[DirFile | str]:
    """``list_directory`` through a directory table: the level's subdirectories of any version
    cut it into gaps, and a gap's keys are all files of the level (a key below a deeper
    ``/`` lies in a subtree, whose directory the table has, so it cannot fall between two
    neighbours). Per page of subdirectories one read of them and one read of the live rows
    of all its gaps (``files``: a store sends the gaps as one query), so a level costs two
    queries per ``_SUBDIRECTORY_PAGE`` subdirectories it ever had, however many are gone in
    the version; what is read is bounded by the level (its live entries, its dead files,
    the subdirectories it ever had)."""
    rest = after[len(prefix) :] if after.startswith(prefix) else ""
    if "/" in rest:  # a subdirectory (or a key inside one) as the cursor: past its subtree
        after = past_subtree(prefix + rest[: rest.index("/") + 1])
    left = -1 if limit is None else limit  # entries still to send (-1: no limit)
    while left:
        found = subdirectories(prefix, after, _SUBDIRECTORY_PAGE)
        gaps: list[Gap] = []
        for sub, _ in found:
            gaps.append((after, sub))
            after = past_subtree(sub)
        whole = len(found) < _SUBDIRECTORY_PAGE  # the last page: its last gap runs to the level's end
        if whole:
            gaps.append((after, None))
        live = [sub for sub, is_live in found if is_live]
        shown = 0  # live subdirectories sent
        for rows in files(prefix, gaps, None if left < 0 else left):
            for row in rows:
                while shown < len(live) and live[shown] < row[0]:
                    yield live[shown]
                    shown, left = shown + 1, left - 1
                    if not left:
                        return
                yield row
                left -= 1
                if not left:
                    return
        for sub in live[shown:]:
            yield sub
            left -= 1
            if not left:
                return
        if whole:
            return


def narrowed(records: Iterator[Record], where: RecordFilter | None, limit: int | None) -> Iterator[Record]:
    """Apply the reference filter semantics and a limit to a streamed listing."""
    if where is not None:
        records = filter(where.matches, records)
    return itertools.islice(records, limit) if limit is not None else records


def page_hint(page_size: int, limit: int | None, where: RecordFilter | None) -> int:
    """Rows to fetch per page: no more than an unfiltered ``limit`` needs (at least 1)."""
    if limit is not None and where is None:
        return max(1, min(page_size, limit))
    return page_size


def revision_mismatch(current: Dataset, expected: int | None) -> PreconditionFailed:
    """The error for a conditional update that found ``current`` at another revision."""
    return PreconditionFailed(
        f"dataset {current.name!r} is at revision {current.revision}, not {expected}: it changed "
        "since you read it; read it again and retry",
        dataset=current.name,
        revision=current.revision,
    )


def past_subtree(directory: str) -> str:
    """A cursor above every key under ``directory`` (ending in ``/``) and below the next key
    outside it: no valid key holds more than MAX_KEY_BYTES bytes, so none under the
    directory reaches this many U+10FFFF (the greatest code point, 4 UTF-8 bytes) after it."""
    return directory + "\U0010ffff" * (MAX_KEY_BYTES // 4 + 1)


def prefix_end(prefix: str) -> str:
    """A string above every key that starts with ``prefix`` (non-empty) and below every other
    key above ``prefix``: keys with the prefix are ``prefix <= key < prefix_end(prefix)``, a
    range an ordered key index serves.

    The next code point after the last character that is not U+10FFFF, skipping the
    surrogates (no key holds one, and neither SQLite nor BSON can bind one): a prefix ending in
    U+D7FF (followed by a surrogate) or in U+10FFFF (followed by nothing) raised
    ``UnicodeEncodeError`` or ``ValueError`` out of every listing and diff with it, a bare 500
    over the API (catalog43). A prefix of U+10FFFF alone has no successor of its length;
    ``past_subtree``'s bound serves it (no valid key reaches it)."""
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return past_subtree(prefix)
    following = ord(stem[-1]) + 1
    return stem[:-1] + chr(_SURROGATES_END if _SURROGATES_START <= following < _SURROGATES_END else following)


def prefix_below(prefix: str) -> str:
    """A string below ``prefix`` (non-empty), close to it: a lower seek bound (``key > bound``)
    for the keys that start with it. The last character one code point lower, skipping the
    surrogates (U+E000 becomes U+D7FF, never the unbindable U+DFFF)."""
    last = ord(prefix[-1])
    if last == 0:
        return prefix[:-1]
    before = last - 1
    return prefix[:-1] + chr(
        _SURROGATES_START - 1 if _SURROGATES_START <= before < _SURROGATES_END else before
    )


_SURROGATES_START, _SURROGATES_END = 0xD800, 0xE000


def diff_page(a: int, b: int) -> int:
    """Rows per page for each of the 2 * (b - a) revision streams a store's diff merges."""
    return max(64, 8192 // (2 * (b - a)))


def stale_base(dataset: str, base: int, head: int) -> StaleBase:
    """The error for a commit on ``base`` when the head has moved on to ``head``."""
    return StaleBase(
        f"cannot commit to dataset {dataset!r} on version {base}: the head is now version {head}; "
        "rebase your changes on the head and retry",
        dataset=dataset,
        base=base,
        head=head,
    )
