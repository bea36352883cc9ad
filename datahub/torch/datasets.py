"""Map-style datasets: a version's raw records (``VersionDataset``) and a packed version
(``PackedDataset``). Both hand ``transform(data, labels)`` the encoded bytes and the
record's labels; the default transform decodes to a uint8 (3, H, W) tensor.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from datahub.catalog import Catalog, Record, RecordFilter
from datahub.errors import BadImage, Conflict, InvalidInput, ObjectChanged, RecordNotFound
from datahub.pack.job import INDEX_FORMAT, INDEX_KEY
from datahub.pack.layout import KIND_IMAGE, decode_sample
from datahub.pack.shard import ShardReader, fd_sha256, file_identity, settled_state
from datahub.torch._torch import Dataset, Sampler, image_tensor
from datahub.torch.files import OPEN_BUFFER

log = logging.getLogger(__name__)

Transform = Callable[[bytes | memoryview, Mapping[str, Any]], Any]
_CHUNK = 16 * 1024**2  # shard download read size (bounded memory)


def decode_with_labels(data: bytes | memoryview, labels: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The default transform: (uint8 tensor (3, H, W), labels)."""
    return image_tensor(data), dict(labels)


def _transformed(transform: Transform, data: bytes | memoryview, labels: Mapping[str, Any], key: str,
                 where: str, how: str) -> Any:  # fmt: skip
    """``transform(data, labels)``; a record the default transform cannot decode as a picture is
    a BadImage naming its key, its version and what to do. Why: it said "image '' cannot be
    decoded (UnidentifiedImageError: cannot identify image file <_io.BytesIO object at 0x…>)",
    naming no record, from the PyTorch script a version page of non-image files shows
    (newuser34). ``where``: ``pets@v1`` (or a description); ``how``: the call that takes a
    ``transform=``."""
    if transform is not decode_with_labels:
        return transform(data, labels)
    try:
        return image_tensor(data, key=key), dict(labels)
    except BadImage as exc:
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else exc.message
        raise type(exc)(
            f"record {key!r} of {where} cannot be decoded as an image ({cause}), which the default "
            f"transform does: give {how} a transform=fn(data, labels) that reads such files, or "
            "choose the image records (prefix=, where=)",
            key=key,
            version=where,
        ) from exc


class VersionDataset(Dataset):
    """Every record of a version, read through the cache (``CacheSource``) or a mount (``MountSource``)."""

    def __init__(self, records: Sequence[Record], source: Any, transform: Transform | None = None) -> None:
        self.records = list(records)
        self.source = source
        self.transform = transform or decode_with_labels
        self.version = "this version"  # dataset@vN when from_catalog made it (errors name it)

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog,
        dataset: str,
        ref: str | int | None,
        source: Any,
        *,
        prefix: str = "",
        where: str | None = None,
        transform: Transform | None = None,
    ) -> VersionDataset:
        """The records of ``dataset@ref`` (resolved once), after the source's ``check_version``
        (where it has one: CacheSource, MountSource) agrees that it reads that version, so a
        mount of another version is refused instead of read as this one.

        An empty selection (no record under ``prefix`` matches ``where``, or the version has
        none) is InvalidInput naming the version, the prefix and the filter. Why here: it is
        never useful for training, and a DataLoader given it died inside torch with
        ``ValueError: num_samples=0`` (a browser page's PyTorch script, a filter matching
        nothing), naming neither the selection nor what to change."""
        version = catalog.resolve(dataset, ref)
        check = getattr(source, "check_version", None)
        if check is not None:
            check(dataset, version.seq)
        name = f"{dataset}@v{version.seq}"
        records = _files(catalog.list_records(dataset, version.seq, prefix=prefix), where)
        if not records:
            raise _empty_selection(name, prefix, where)
        check_records = getattr(source, "check_records", None)
        if check_records is not None:  # MountSource: a record its mount cannot show (review44)
            check_records(records)
        made = cls(records, source, transform)
        made.version = name
        return made

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Any:
        record = self.records[index]
        return _transformed(
            self.transform,
            self.source.read(record),
            record.labels,
            record.key,
            self.version,
            "VersionDataset.from_catalog",
        )

    def hint(self, indices: Sequence[int]) -> None:
        """The next reads will be ``indices``, in this order."""
        self.source.hint([self.records[i] for i in indices])

    def hinting(self, sampler: Sequence[int] | Any, lookahead: int = 256) -> HintingSampler:
        """Wrap a sampler so the cache learns its order ``lookahead`` indices at a time."""
        return HintingSampler(sampler, self, lookahead)


def _empty_selection(name: str, prefix: str, where: str | RecordFilter | None) -> InvalidInput:
    """The error of a selection with no record: what was asked, and what to change."""
    asked = [f"under prefix {prefix!r}"] if prefix else []
    asked += [f"matching filter {str(where)!r}"] if where is not None and str(where) else []
    chosen = " ".join(asked) if asked else "at all"
    fix = (
        "check the prefix= and where= given to VersionDataset.from_catalog (the dataset browser's "
        "filter shows what a filter matches), or choose another version"
        if asked
        else "choose a version with records"
    )
    return InvalidInput(
        f"{name} has no records {chosen}: an empty selection cannot be trained on; {fix}",
        version=name,
        prefix=prefix,
        filter=str(where) if where is not None else None,
    )


def _no_samples(name: str, skipped: Sequence[Mapping[str, Any]]) -> InvalidInput:
    """The error of a packed version without a sample (its pack skipped every record). Why:
    such a dataset was built with length 0, and a DataLoader given it died inside torch with
    ``ValueError: num_samples=0``, naming neither the version nor why it is empty (packed43)."""
    shown = "; ".join(f"{s.get('key')!r}: {s.get('reason', '?')}" for s in skipped[:3])
    why = (
        f"its pack skipped every one of its source's records ({len(skipped)}, e.g. {shown}; all are "
        "listed in its index.json, under 'skipped')"
        if skipped
        else "its pack found no record to pack"
    )
    return InvalidInput(
        f"{name} holds no samples: {why}. An empty version cannot be trained on: repair or replace "
        "those records in the source and pack it again (docs/pack.md), or open another version",
        version=name,
        skipped=len(skipped),
    )


def _files(records: Iterable[Record], where: str | RecordFilter | None) -> list[Record]:
    """The records a mount shows as files, those matching ``where``: a key that is also a
    directory (``x`` beside ``x/y``, docs/catalog.md "Limits") is hidden, as on a mount.

    Why for every source: a MountSource would find a directory there and fail the epoch, and
    the same version must give the same samples at the same indices whichever source reads
    it. Why the filter here, not in the catalog: a file is hidden by keys the filter may not
    select, so the version's whole listing (under ``prefix``) decides, in the same one pass."""
    filt = RecordFilter.parse(where) if isinstance(where, str) else where  # as Catalog.list_records
    kept: list[Record] = []
    directories: set[str] = set()
    for record in records:
        parent = record.key.rpartition("/")[0]
        while parent and parent not in directories:
            directories.add(parent)
            parent = parent.rpartition("/")[0]
        if filt is None or filt.matches(record):
            kept.append(record)
    return [r for r in kept if r.key not in directories] if directories else kept


class HintingSampler(Sampler):
    """Yields the wrapped sampler's indices; before each window, hints the next window.

    It runs in the process that iterates the sampler (the DataLoader's main process), so
    the hinted pages land in the shared tiers (disk/shared) that every worker reads.
    """

    def __init__(self, sampler: Any, dataset: VersionDataset, lookahead: int = 256) -> None:
        self.sampler, self.dataset, self.lookahead = sampler, dataset, max(1, lookahead)

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """Pass ``epoch`` on to the wrapped sampler (a no-op for one without epochs).

        Why: a training loop calls ``loader.sampler.set_epoch(e)`` so that a DistributedSampler
        reshuffles each epoch; this wrapper had no such method, so the call failed, or a loop
        checking ``hasattr`` skipped it and every epoch read the first one's order (review44).
        Each ``__iter__`` asks the wrapped sampler afresh, so the hints follow the new order."""
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        upcoming = iter(self.sampler)
        while True:
            window = [i for _, i in zip(range(self.lookahead), upcoming, strict=False)]
            if not window:
                return
            self.dataset.hint(window)
            yield from window


class PackedDataset(Dataset):
    """Every sample of a packed version, by a global index over its shards.

    Shards are downloaded through the cache into ``cache_dir`` once (verified against
    the record's checksum) and opened read-only; each DataLoader worker opens its own
    LMDB handles on first use after it starts. Index ``i`` maps to (shard, position) by
    a binary search over cumulative counts, so any sampler order (a global shuffle
    across shards included) works.
    """

    def __init__(self, shard_paths: Sequence[Path], keys: Sequence[Sequence[str]],
                 transform: Transform | None = None) -> None:  # fmt: skip
        if len(shard_paths) != len(keys):
            raise InvalidInput("PackedDataset needs one key list per shard")
        self.readers = [ShardReader(p) for p in shard_paths]
        self.keys = [list(k) for k in keys]
        self.ends = []
        total = 0
        for k in self.keys:
            total += len(k)
            self.ends.append(total)
        self.transform = transform or decode_with_labels
        self.version = "this packed version"  # dataset@vN when open made it (errors name it)

    @classmethod
    def open(
        cls,
        catalog: Catalog,
        source: Any,
        dataset: str,
        ref: str | int | None = None,
        *,
        cache_dir: str | os.PathLike[str],
        transform: Transform | None = None,
    ) -> PackedDataset:
        """Load the version's ``index.json`` and make every shard a local file (``source``: CacheSource)."""
        version = catalog.resolve(dataset, ref)
        try:
            index_record = catalog.get_record(dataset, version.seq, INDEX_KEY)
        except RecordNotFound as exc:  # a raw version: say what PackedDataset wants instead
            raise InvalidInput(
                f"{dataset}@v{version.seq} is not a packed version (it has no {INDEX_KEY}): pack it "
                f"(`datahub pack {dataset}@v{version.seq} --to {dataset}-packed`, docs/pack.md) and "
                f"open the pack, or read its records as they are with VersionDataset.from_catalog",
                dataset=dataset,
                version=version.seq,
            ) from exc
        index = json.loads(source.read(index_record))
        if index.get("format") != INDEX_FORMAT:
            raise InvalidInput(f"{dataset}@v{version.seq} is not a packed version (index format "
                               f"{index.get('format')!r}); pack it with `datahub pack`", dataset=dataset)  # fmt: skip
        name = f"{dataset}@v{version.seq}"
        if not any(s.get("keys") for s in index["shards"]):
            raise _no_samples(name, index.get("skipped") or [])
        directory = Path(cache_dir)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        readers = []
        for s in index["shards"]:
            record = catalog.get_record(dataset, version.seq, s["record"])
            path, st = _verified_copy(source, record, directory, name)
            # bound to the copy verified here (packed43): see ShardReader
            digest = record.checksum[7:] if record.checksum.startswith("sha256:") else ""
            where = f"shard {record.key} of {name}"
            readers.append(ShardReader(path, identity=file_identity(st), sha256=digest, where=where))
        made = cls([r.path for r in readers], [s["keys"] for s in index["shards"]], transform)
        made.readers = readers
        made.version = name
        return made

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def locate(self, index: int) -> tuple[int, str]:
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range 0..{len(self) - 1}")
        shard = bisect.bisect_right(self.ends, index)
        start = self.ends[shard - 1] if shard else 0
        return shard, self.keys[shard][index - start]

    def __getitem__(self, index: int) -> Any:
        return self._sample(*self.locate(index))

    def shard_samples(self, shard: int) -> Iterator[Any]:
        """Every sample of one shard in key order (what a task-pulling stream yields)."""
        for key in self.keys[shard]:
            yield self._sample(shard, key)

    def task_samples(self, task: Any) -> Iterator[Any]:
        """``shard_samples`` of a ``shard_epoch`` task, once its epoch is this version's.

        A task made for another version (its payload's ``version``) is a Conflict naming both:
        its shard number means another file there, and reading this version's shard under it
        mixed two versions' samples in one epoch (review44). A task naming no version (a job
        made with a shard count) cannot be checked and is read."""
        made_for = task.payload.get("version")
        if made_for is not None and made_for != self.version:
            raise Conflict(
                f"task {task.index} of job {task.job!r} is a shard of {made_for}'s epoch, not of "
                f"{self.version}: open {made_for} to work this epoch, or make {self.version} a job "
                "of its own (shard_epoch(queue, ANOTHER_JOB, dataset))",
                job=task.job,
                version=self.version,
                recorded=made_for,
            )
        return self.shard_samples(task.payload["shard"])

    def _sample(self, shard: int, key: str) -> Any:
        """Why one helper: indexing and the task stream must hand ``transform`` the same kind of
        data (a copied file as bytes: ``json.loads`` takes no memoryview)."""
        sample = decode_sample(key, self.readers[shard].get(key))
        data = sample.payload if sample.kind == KIND_IMAGE else bytes(sample.payload)
        return _transformed(self.transform, data, sample.labels, key, self.version, "PackedDataset.open")


def _local_copy(source: Any, record: Record, directory: Path, where: str = "this packed version") -> Path:
    """``_verified_copy``'s path."""
    return _verified_copy(source, record, directory, where)[0]


def _verified_copy(
    source: Any, record: Record, directory: Path, where: str = "this packed version"
) -> tuple[Path, os.stat_result]:
    """Download one shard through the cache into ``directory`` (atomic), or reuse the copy there.

    A copy is reused only while its stamp (``NAME.lmdb.verified``: the record's checksum, URL,
    etag and size, and the file's st_ino, st_size, st_mtime_ns and st_ctime_ns when it was
    verified) still matches the file: any write through the file system, a rename over it or a
    restore changes the inode or the ctime, which no tool can set back. Why: the copy was reused
    whenever a file of the right size was there, so one damaged or rewritten in place (another
    tool, a half-restored backup, another dataset's file of that name) served wrong samples
    without a word (promise 2: a changed cache file is never served). Why a stamp, not a hash
    at every open: a stat costs microseconds, a 256 MiB shard's sha256 most of a second. The
    price: a change below the file system (a media error the disk does not report) leaves the
    stamp matching; deleting the stamps makes the next open hash every copy again.

    A copy whose stamp does not match is hashed again and, if it matches the record's sha256,
    stamped and kept; otherwise it is replaced with a warning naming the shard and ``where``.
    A record without a sha256 checksum cannot be checked locally: its copy is reused only while
    its stamp (made when this code downloaded it) matches, and downloaded again otherwise.

    Returns the path and the stat of the file verified (its identity: a reader bound to it
    reads that file, or another holding the same bytes, never one that replaced it since)."""
    name = (
        record.checksum.partition(":")[2]
        or hashlib.sha256(f"{record.url}\0{record.etag}".encode()).hexdigest()
    )
    path = directory / f"{name[:32]}.lmdb"
    stamp_path = path.with_name(f"{path.name}.verified")
    want = record.checksum[7:] if record.checksum.startswith("sha256:") else ""
    try:
        before = path.stat()
    except FileNotFoundError:
        before = None
    if before is not None:
        if _read_stamp(stamp_path) == _stamp(before, record):
            return path, before
        after = _rehashed(path, want) if want and before.st_size == record.size else None
        if after is not None:
            _write_stamp(stamp_path, _stamp(after, record))
            return path, after
        log.warning(
            "shard %s of %s: the local copy %s does not match %s; downloading it again",
            record.key,
            where,
            path,
            f"its recorded checksum ({record.checksum})"
            if want
            else "the stamp written when it was downloaded (the record has no sha256 to check it against)",
        )
    digest = hashlib.sha256()
    # 0600: a shard holds a dataset's bytes, which no other local user may read
    fd, tmp = _private_tmp(path)
    try:
        # explicit buffering: no isatty() (files.py); the fd stays open to stamp the file renamed
        with open(fd, "wb", buffering=OPEN_BUFFER, closefd=False) as fh:
            for offset in range(0, record.size, _CHUNK):
                chunk = source.read(record, offset, min(_CHUNK, record.size - offset))
                digest.update(chunk)
                fh.write(chunk)
        if want and digest.hexdigest() != want:
            raise ObjectChanged(
                f"shard {record.key} of {where} ({record.url}) does not match its recorded checksum",
                key=record.key,
                version=where,
            )
        # durable before it is named and stamped: after a power loss a stamp that outlived
        # unwritten data would match a file of the right size and inode holding zeros, and the
        # copy would be served unhashed (promise 2)
        # its mtime in the past: a write after the stamp moves it, whatever the clock's tick (review72)
        settled_state(fd)
        os.fsync(fd)
        os.replace(tmp, path)
        made = os.fstat(fd)  # after the rename: it may set ctime
        _write_stamp(stamp_path, _stamp(made, record))
    finally:
        os.close(fd)
        tmp.unlink(missing_ok=True)
    return path, made


def _rehashed(path: Path, want: str) -> os.stat_result | None:
    """The state of the copy at ``path`` if it holds the bytes of sha256 ``want`` and did not
    change while hashed, else None. Taken with its mtime set in the past first when recent
    (``settled_state``), so that the stamp shows any later write whatever the clock's tick: a
    copy stamped in the tick of its last write was reused unhashed after a same-size write in
    that tick (review72)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        settled = settled_state(fd)
        if fd_sha256(fd) != want:
            return None
        after = os.fstat(fd)
    finally:
        os.close(fd)
    return after if file_identity(after) == file_identity(settled) else None


def _stamp(st: os.stat_result, record: Record) -> dict[str, Any]:
    """What a verified copy was: the record it holds and the file as it was then."""
    return {
        "checksum": record.checksum,
        "url": record.url,
        "etag": record.etag,
        "size": record.size,
        "st_ino": st.st_ino,
        "st_size": st.st_size,
        "st_mtime_ns": st.st_mtime_ns,
        "st_ctime_ns": st.st_ctime_ns,
    }


def _read_stamp(path: Path) -> dict[str, Any] | None:
    """The stamp beside a copy, or None (missing or unreadable: the copy is checked again)."""
    try:
        got = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def _write_stamp(path: Path, stamp: dict[str, Any]) -> None:
    """Write a stamp atomically (a reader sees the old one or the new one, never half)."""
    fd, tmp = _private_tmp(path)
    try:
        with open(fd, "wb", buffering=OPEN_BUFFER) as fh:
            fh.write(json.dumps(stamp, sort_keys=True).encode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _private_tmp(path: Path) -> tuple[int, Path]:
    """A new 0600 file beside ``path`` that no other caller writes (O_EXCL, a random name),
    open for writing. Why not ``NAME.<pid>.tmp``: two threads of one process opening the same
    packed version (a train and a validation set, opened at once) wrote one file, and the
    second's rename found it gone: ``FileNotFoundError`` with no shard named, after the first
    had renamed a file the second was still rewriting into place (packed43)."""
    fd, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    return fd, Path(name)
