"""Changes to journal records inside one transaction: pure functions of a ``Txn``.

They take no lock and touch no memory of the namespace, so the namespace can run them in
its own transactions and group commits without any lock held (see ``workspace``'s lock
order). Each returns what the caller needs to account for (bytes referenced in the shared
tier, the new generation).
"""

from __future__ import annotations

from datahub.errors import NotFound
from datahub.writeback.journal import Txn


def delete_file(txn: Txn, file_id: int, rec: dict) -> None:
    """The file's record goes; its chunks become garbage for the flusher's collector."""
    txn.del_file(file_id)
    txn.add_garbage([k for k, _ in rec["chunks"].values()])


def empty_unsound(txn: Txn, file_id: int, gen: int) -> int:
    """A new file whose overlapped first commit failed and could not be undone: its record
    names chunks that may be missing. A namespace operation journals a created file as
    empty, so write it as empty, trusted (the uploaded chunks stay staged in memory
    for the next fsync), and ``unacked``: no fsync or close of it succeeded, so a revert
    or recovery removes it. Returns the change of shared bytes referenced."""
    rec = txn.file(file_id)
    if rec is None or rec["gen"] != gen or not rec.get("unverified"):
        return 0
    freed = sum(n for _, n in rec["chunks"].values())
    rec.update(size=0, gen=gen + 1, chunks={}, unacked=True)
    del rec["unverified"]
    txn.put_file(file_id, rec)
    return -freed


def undo_first_commit(txn: Txn, file_id: int, path: str, gen: int, what: str) -> int:
    """Take a failed overlapped first commit out of the journal; returns the bytes delta."""
    rec = txn.file(file_id)
    if rec is None or rec["gen"] != gen or not rec.get("unverified"):
        raise NotFound(f"the record of {path!r} in {what} changed before its failed first fsync was undone")
    txn.del_file(file_id)
    if txn.entry(path) == {"t": "f", "id": file_id}:
        txn.del_entry(path)
    return -sum(n for _, n in rec["chunks"].values())


def point_at_chunks(
    txn: Txn, file_id: int, rec: dict, size: int, mtime: float, chunks: dict, unverified: dict | None
) -> tuple[int, int]:
    """Write the file's new chunk map into ``rec``; returns (shared bytes delta, new generation).

    Chunks the old map named and the new one does not become garbage. ``unverified`` marks
    a first commit whose chunk uploads may still be running."""
    old = {k: n for k, n in rec["chunks"].values()}
    new = {k: n for k, n in chunks.values()}
    txn.add_garbage([k for k in old if k not in new])
    rec.update(
        size=size,
        mtime=mtime,
        gen=rec["gen"] + 1,
        chunks={str(i): list(v) for i, v in chunks.items()},
    )
    rec.pop("src", None)  # an open file's chunk map is complete (it was reloaded on open)
    rec.pop("unacked", None)  # this commit is the file's own fsync or close
    if unverified:
        rec["unverified"] = unverified
    else:
        rec.pop("unverified", None)  # every chunk it names is durable now
    txn.put_file(file_id, rec)
    return sum(new.values()) - sum(old.values()), rec["gen"]


def move_tree(txn: Txn, old: str, new: str, entry: dict) -> None:
    """Move an entry (and, for a directory, everything under it) from ``old`` to ``new``."""
    if entry["t"] == "d":
        for path, child in txn.descendants(old):
            txn.del_entry(path)
            txn.put_entry(new + path[len(old) :], child)
    txn.del_entry(old)
    txn.put_entry(new, entry)


def cover_is_ours(txn: Txn, cover: dict, epoch: int) -> bool:
    """Whether a cover record found in the shared tier can be one this journal wrote: its file
    id was reserved here (below ``next_id``: ids are reserved by a durable transaction before
    any file gets one) and its number is of an epoch this journal began (at most ``epoch``, the
    last session's). Why (review22a): recovery reads every byte of a pack, a user's file's too,
    and a file holding a record (a copy of a pack file, say) was replayed as a new file; with
    an id not handed out yet, the next new file given that id took its record, and that file's
    close was acknowledged with no name left to it (its bytes read under the other's). And it
    is seeded (cover22: bound to this journal) and placed (cover24: bound to where it was
    written) unless of an epoch this journal wrote such records before it did
    (``seeded_from``, ``must_be_placed``), and keyed (wbgaps25: its MAC made with the journal's
    secret ``cover_key``) unless of an epoch above ``COVER_KEYED`` (a session of a datahub from
    before wbgaps25: ``must_be_placed`` with that epoch)."""
    next_id = txn.meta("next_id")
    if not (cover["id"] < int(next_id or 1) and cover["c"] >> 32 <= epoch):
        return False
    if not cover.get("placed") and must_be_placed(cover["c"] >> 32, txn.meta(COVER_PLACED)):
        return False
    if not cover.get("keyed") and must_be_placed(cover["c"] >> 32, txn.meta(COVER_KEYED)):
        return False  # of an epoch that keyed its records: bytes anyone could have computed
    return bool(cover.get("seeded")) or cover["c"] >> 32 < seeded_from(txn, epoch)


COVER_SEEDED = "cover_seeded"  # the first epoch whose cover records this journal seeded
COVER_PLACED = "cover_placed"  # the last epoch whose cover records this journal placed
COVER_KEYED = "cover_keyed"  # the last epoch whose pack cover records this journal keyed (wbgaps25)
# the journal's secret key of its keyed cover records (``packs.cover_mac``), hex; never shipped
# in the log's rows (``journal.shipped``), only in its header (``shared_log.attach``)
COVER_KEY = "cover_key"


def must_be_placed(record_epoch: int, placed: str | int | None) -> bool:
    """Whether a cover record of epoch ``record_epoch`` is replayed only if ``placed``
    (``packs.COVER_MAGIC_PLACED``, or a RADOS or S3 object's own): of an epoch at or below
    ``placed``, the journal's meta ``COVER_PLACED`` (the last session that placed its records;
    every session since cover24 does, from its recovery on) or the ``cover_placed`` of its
    shared log's header (adoption). None (a journal, or a log, from before cover24): no epoch.
    Why (cover24): a copy of one of this journal's own records at another place in its packs
    (a user's file holding a pack slot) verified with the journal's seed; replayed from there
    in place of the real one, the acknowledged file named the range of the file holding the
    copy, and was lost with that file's pack (or, with other bytes before the copy, dropped as
    a torn first close). An epoch above ``placed`` is that of a session
    of a datahub from before cover24 (a downgrade): its records are accepted unplaced, as it
    wrote them; only records above ``covered`` are replayed, all of the last session's epoch."""
    return placed is not None and record_epoch <= int(placed)


def seeded_from(txn: Txn, epoch: int) -> int:
    """The first epoch whose cover records this journal wrote seeded (``packs.cover_seed``):
    an unseeded record (from before cover22) is accepted only of an epoch below it. Unset:
    no session since cover22 began, every record of the journal is unseeded (up to ``epoch``).
    Why (cover22): a copy of another workspace's pack verified here and was replayed."""
    value = txn.meta(COVER_SEEDED)
    return epoch + 1 if value is None else int(value)


def replay_cover(txn: Txn, key: str, cover: dict, rec: dict) -> bool:
    """Write a new file's first commit again from its cover record (``packs.py``), after a
    power loss undid the journal transaction that held it: the record its commit wrote, still
    unverified (recovery then checks the chunk's length and CRC), and its name. False, and
    nothing written, when the id or the name is taken or the parent is no directory (then
    the record is not that of the undone transaction). ``rec``: a created file's record
    (``model.new_record``), as the first commit found it."""
    path, file_id, length = cover["path"], cover["id"], cover["len"]
    parent = txn.entry(path.rpartition("/")[0])
    if txn.file(file_id) is not None or txn.entry(path) is not None or parent is None or parent["t"] != "d":
        return False
    point_at_chunks(
        txn, file_id, rec, cover["size"], cover["mtime"], {0: (key, length)}, {key: [length, cover["crc"]]}
    )
    txn.put_entry(path, {"t": "f", "id": file_id})
    return True
