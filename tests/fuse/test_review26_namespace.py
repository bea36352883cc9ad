"""review26: a version mount's paged namespace attacked where names are odd (issue 38).

Real mounts (embedded SQLite catalog, and a node that is an API client of a real server):
every directory the mount lists equals the version's records at that level (a file shadowed
by a directory of its name left out), names that differ only in Unicode normalisation are
two files with their own bytes, a 255-byte name lists and opens, and directories of exactly
a READDIR page of entries and one more list whole through every buffer size.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import threading
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from datahub.api import create_app
from datahub.api.server import ApiServer
from datahub.catalog import open_catalog
from datahub.catalog.model import Delete, Put, Record
from datahub.storage import StoreRegistry
from fuse_adapter.paged_tree import READDIR_CHUNK
from tests.faults import FlakyProxy
from tests.fuse.conftest import FuseEnv

pytestmark = [pytest.mark.fuse, pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")]

NFC = unicodedata.normalize("NFC", "caf\u00e9")
NFD = unicodedata.normalize("NFD", "caf\u00e9")
LONG = "\u00e9" * 127 + "x"  # 255 bytes of UTF-8
assert len(LONG.encode()) == 255

#: keys whose bytes the test reads back (stored in S3): each its own content
READ = {
    NFC: b"composed\n",
    NFD: b"decomposed\n",
    f"m/{NFC}/inside": b"under the composed directory\n",
    f"m/{NFD}": b"a file of the decomposed name\n",
    LONG: b"a 255-byte name\n",
    f"d/{LONG}": b"a 255-byte name in a directory\n",
    "a": b"a file shadowed by directory a/\n",
    "a/b": b"a/b\n",
    "a!": b"a!\n",
    "a-b": b"a-b\n",
    "a.c": b"a.c\n",
    "a b": b"a b\n",
    "a0": b"a0\n",
    "\U0001f600/x": b"emoji dir\n",
    "\uffee": b"U+FFEE\n",
    "q/a+b": b"plus\n",
    "q/x?y=1&z": b"query characters\n",
    "q/p%41": b"percent\n",
    "q/h#f": b"hash\n",
    "q/p%41/in": b"in a directory whose name has a percent\n",
}


def _listed_only() -> dict[str, int]:
    """Keys listed, never read (fake URLs): directories at and around a page of entries."""
    keys: dict[str, int] = {}
    for n in (READDIR_CHUNK - 1, READDIR_CHUNK, READDIR_CHUNK + 1, 2 * READDIR_CHUNK):
        for i in range(n):
            keys[f"p{n}/f{i:05}"] = i
    # a page boundary made of shadowed files: f0000..f1023 are files and directories alike
    for i in range(READDIR_CHUNK + 1):
        keys[f"shadow/f{i:05}"] = i
        if i % 2 == 0:
            keys[f"shadow/f{i:05}/in"] = 1
    return keys


def _expected(keys: list[str]) -> dict[str, set[str]]:
    """Each directory's names as a mount must show them: a file of a directory's name hidden."""
    levels: dict[str, set[str]] = {"": set()}
    dirs: set[str] = {""}
    for key in keys:
        parts = key.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    for key in keys:
        parts = key.split("/")
        for i in range(1, len(parts) + 1):
            path = "/".join(parts[:i])
            levels.setdefault("/".join(parts[: i - 1]), set()).add(parts[i - 1])
            if path in dirs:
                levels.setdefault(path, set())
    return levels


def _walk(root: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        names = dirnames + filenames
        assert len(names) == len(set(names)), f"{rel}: a name listed twice"
        out["" if rel == "." else rel] = set(names)
    return out


@pytest.fixture
def odd_version(env: FuseEnv) -> tuple[int, list[str]]:
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/odd")
        changes = []
        for i, (key, data) in enumerate(sorted(READ.items())):
            name = f"o{i:03}"
            info = store.put(name, data)
            changes.append(Put(Record(key, store.url_for(name), info.etag, len(data))))
    changes += [
        Put(Record(k, f"s3://{env.bucket}/none/{k}", "e", size)) for k, size in _listed_only().items()
    ]
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("odd")
        version = catalog.commit("odd", changes, message="odd names")
    finally:
        catalog.close()
    return version.seq, [c.record.key for c in changes]


@contextlib.contextmanager
def _remote(env: FuseEnv, proxy: list[FlakyProxy] | None = None) -> Iterator[FuseEnv]:
    """``env`` with its catalog served by an API server (a node that is an API client); through
    a FlakyProxy that fails nothing, appended to ``proxy``, when given (it counts requests)."""
    env.config.api.port, env.config.api.local_mode = 0, True
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(ApiServer(create_app(env.config, catalog=catalog), env.config)).url
            if proxy is not None:
                proxy.append(stack.enter_context(FlakyProxy(url)))
                url = proxy[-1].url
            path = env.root / "remote.toml"
            path.write_text(f'catalog_url = "{url}"\n' + env.config_path.read_text())
            yield FuseEnv(env.root, path, env.config, env.bucket, env.endpoint)
    finally:
        catalog.close()


@pytest.mark.parametrize("where", ["embedded", "remote"])
def test_odd_names_list_as_the_records_and_read_their_own_bytes(
    env: FuseEnv, odd_version: tuple[int, list[str]], where: str
) -> None:
    seq, keys = odd_version
    mnt = env.mountpoint("odd")
    with contextlib.ExitStack() as stack:
        menv = stack.enter_context(_remote(env)) if where == "remote" else env
        stack.enter_context(menv.mounted(mnt, "odd@v1", "--no-prefetch"))
        root = mnt / "odd" / f"v{seq}"
        shadowed = {k for k in READ if any(other.startswith(k + "/") for other in READ)}
        assert shadowed == {"a", "q/p%41"}
        # lookups before any listing (the probe path), then the listings
        for key, data in READ.items():
            if key not in shadowed:
                assert (root / key).read_bytes() == data, key
        for key in shadowed:
            assert (root / key).is_dir() and not (root / key).is_file()
        assert _walk(root) == _expected(keys)
        for key, data in READ.items():
            if key not in shadowed:
                assert (root / key).read_bytes() == data, key
        for n in (READDIR_CHUNK - 1, READDIR_CHUNK, READDIR_CHUNK + 1, 2 * READDIR_CHUNK):
            with os.scandir(root / f"p{n}") as it:
                entries = {e.name: e.stat().st_size for e in it}
            assert entries == {f"f{i:05}": i for i in range(n)}


def test_listings_stay_whole_while_other_threads_drop_their_pages(
    env: FuseEnv, odd_version: tuple[int, list[str]]
) -> None:
    """One page in the cache (through an API server, whose requests say how often a directory
    was listed): each READDIRPLUS of a directory may find its page dropped by another reader's
    listing and list it again; the offsets it handed the kernel must still name the same
    entries (a listing is the same every time), so every reader sees every directory whole,
    each name once."""
    seq, keys = odd_version
    expected = _expected(keys)
    dirs = [f"p{n}" for n in (READDIR_CHUNK - 1, READDIR_CHUNK, READDIR_CHUNK + 1, 2 * READDIR_CHUNK)]
    dirs += ["shadow", ""]
    mnt = env.mountpoint("small")
    proxy: list[FlakyProxy] = []
    with (
        _remote(env, proxy) as menv,
        menv.mounted(mnt, "odd@v1", "--no-prefetch", module="tests.fuse.small_namespace_mount"),
    ):
        root = mnt / "odd" / f"v{seq}"
        failures: list[str] = []

        def reader(turn: int) -> None:
            for i in range(2 * len(dirs)):  # each directory twice, the others read in between
                d = dirs[(turn + i) % len(dirs)]
                fd = os.open(root / d, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    # a READDIRPLUS per 4 KiB of entries: other readers drop the page between them
                    names = [e.name for e in os.scandir(fd)]
                finally:
                    os.close(fd)
                if sorted(names) != sorted(expected[d]):
                    missing = sorted(set(expected[d]) - set(names))[:5]
                    failures.append(
                        f"{d!r}: {len(names)} names, expected {len(expected[d])}; missing {missing}"
                    )

        threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        # whole listings, not one-row probes: each directory's page was dropped between a
        # reader's two reads of it (only one page is kept), so it was listed again
        listed = sum("/directory" in path and "limit=1" not in path for _method, path in proxy[0].requests)
        assert listed >= 2 * len(dirs), listed


#: path segments chosen for their order around "/" (0x2F): below it ("!", "-", ".", " "), just
#: above ("0"), a name that is a prefix of others ("a"), composed and decomposed forms, a
#: character past the BMP and one near its end, and a 255-byte name
SEGMENTS = [
    "a",
    "a+b",
    "p%41",
    "x?y=1&z",
    "a!",
    "a-b",
    "a.c",
    "a b",
    "a0",
    "A",
    NFC,
    NFD,
    "\U0001f600",
    "\uffee",
    LONG[:40],
    LONG,
]
_trees = st.lists(
    st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4).map("/".join),
    min_size=1,
    max_size=30,
    unique=True,
)


def _nowhere(env: FuseEnv, key: str) -> str:
    """An object URL no test reads, of a fixed length: ``none/`` + a key of four 255-byte
    segments (1,023 bytes, a valid key) would be 1,028 bytes, no object key."""
    return f"s3://{env.bucket}/none/{hashlib.sha256(key.encode()).hexdigest()}"


@pytest.mark.parametrize("where", ["embedded", "remote"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(versions=st.lists(st.tuples(_trees, _trees), min_size=3, max_size=3))
@example(versions=[(["/".join([LONG] * 4)], ["a"])] * 3)  # the deepest key there is (1,023 bytes)
def test_every_directory_of_a_mounted_version_lists_its_records(
    env: FuseEnv, versions: list[tuple[list[str], list[str]]], where: str
) -> None:
    """Hypothesis: three datasets of two versions each (the second deletes half the keys of the
    first and puts others, so the directory table holds subdirectories gone in it), mounted
    together through the embedded catalog or an API server: every directory of each version
    lists exactly its records' names (a file shadowed by a directory of its name left out),
    and each file shows its own record's size."""
    catalog = open_catalog(env.config.resolved_catalog_url)
    shown: dict[str, tuple[dict[str, int], dict[str, int]]] = {}  # dataset -> (v1, v2): key -> size
    try:
        for first, second in versions:
            name = f"g{uuid.uuid4().hex[:8]}"
            v1 = {k: i for i, k in enumerate(first)}
            v2 = {k: v1[k] for k in first[: len(first) // 2]} | {k: 1000 + len(k.encode()) for k in second}
            catalog.create_dataset(name)
            catalog.commit(name, [Put(Record(k, _nowhere(env, k), "e", n)) for k, n in v1.items()])
            catalog.commit(
                name,
                [Delete(k) for k in v1 if k not in v2]
                + [Put(Record(k, _nowhere(env, k), "e", v2[k])) for k in second],
            )
            shown[name] = v1, v2
    finally:
        catalog.close()
    mnt = env.mountpoint("generated")
    refs = [f"{name}@v{seq}" for name in shown for seq in (1, 2)]
    with contextlib.ExitStack() as stack:
        menv = stack.enter_context(_remote(env)) if where == "remote" else env
        stack.enter_context(menv.mounted(mnt, *refs, "--no-prefetch"))
        for name, both in shown.items():
            for seq, sizes in enumerate(both, start=1):
                root = mnt / name / f"v{seq}"
                assert _walk(root) == _expected(list(sizes)), f"{name}@v{seq}: {sorted(sizes)}"
                for key, size in sizes.items():
                    if any(other.startswith(key + "/") for other in sizes):
                        assert (root / key).is_dir(), key
                    else:
                        assert (root / key).stat().st_size == size, key


#: record mtimes (meta["mtime"], seconds) no file system time can hold in nanoseconds: in
#: milliseconds (JavaScript's Date.now()), before 1677 or after 2262, the largest 64-bit integer
OUT_OF_RANGE_MTIMES = {
    "ms.jpg": 1_733_000_000_000,
    "past.jpg": -1e10,
    "future.jpg": 9.3e9,
    "huge.jpg": 2**63 - 1,  # the largest a catalog store holds; beyond it a commit is refused (review73)
}


@pytest.mark.parametrize("where", ["embedded", "remote"])
def test_a_record_mtime_out_of_range_leaves_its_directory_listable(env: FuseEnv, where: str) -> None:
    """One record whose ``meta["mtime"]`` does not fit a file time in nanoseconds (a value in
    milliseconds, say) made its whole directory EIO in every version mount: each listing of
    it failed converting that mtime ("int too big to convert"), so no file beside it could be
    listed, looked up or read, and retrying changed nothing (the version is immutable). Such a
    file shows the version's time, as a record without an mtime does."""
    objects = {"ok.jpg": b"listed beside the odd mtimes\n", **{k: k.encode() for k in OUT_OF_RANGE_MTIMES}}
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/mtimes")
        changes = []
        for key, data in objects.items():
            info = store.put(key, data)
            mtime = OUT_OF_RANGE_MTIMES.get(key, 1_600_000_000.5)
            changes.append(
                Put(Record(f"d/{key}", store.url_for(key), info.etag, len(data), meta={"mtime": mtime}))
            )
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("mtimes")
        version = catalog.commit("mtimes", changes)
    finally:
        catalog.close()
    mnt = env.mountpoint("mtimes")
    with contextlib.ExitStack() as stack:
        menv = stack.enter_context(_remote(env)) if where == "remote" else env
        stack.enter_context(menv.mounted(mnt, "mtimes@v1", "--no-prefetch"))
        d = mnt / "mtimes" / f"v{version.seq}" / "d"
        assert sorted(os.listdir(d)) == sorted(objects)
        for key, data in objects.items():
            assert (d / key).read_bytes() == data, key
        assert os.stat(d / "ok.jpg").st_mtime_ns == 1_600_000_000_500_000_000
        for key in OUT_OF_RANGE_MTIMES:
            assert os.stat(d / key).st_mtime_ns == int(version.created_at * 1e9), key


DEEP = "/".join(c * 250 for c in "ABCD")  # a directory 1,003 bytes deep: a name of 21 bytes more is no key


@pytest.mark.parametrize("where", ["embedded", "remote"])
def test_a_name_no_key_can_hold_is_absent_not_eio(env: FuseEnv, where: str) -> None:
    """A lookup in a directory not listed yet first asks the catalog whether the name is a
    subdirectory. A name no key can hold (not UTF-8, a control character, or one that makes
    the path longer than a key may be) made that question an invalid key: the probe failed,
    and the lookup answered EIO ("unknown, not absent", asked again every time), where the
    same lookup after a listing answered ENOENT. No record can have such a name: absent."""
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("names")
        keys = ["d/ok.jpg", f"{DEEP}/f"]
        version = catalog.commit(
            "names", [Put(Record(k, f"s3://{env.bucket}/none/{k}", "e", 1)) for k in keys]
        )
    finally:
        catalog.close()
    mnt = env.mountpoint("names")
    with contextlib.ExitStack() as stack:
        menv = stack.enter_context(_remote(env)) if where == "remote" else env
        stack.enter_context(menv.mounted(mnt, "names@v1", "--no-prefetch"))
        root = os.fsencode(mnt / "names" / f"v{version.seq}")
        absent = [b"\xff", b"d/caf\xe9", b"d/a\nb", b"d/\x7f", os.fsencode(f"{DEEP}/{'x' * 30}")]
        for _pass in ("before any listing", "after the listings"):
            for name in absent:
                with pytest.raises(OSError) as caught:
                    os.stat(root + b"/" + name)
                assert caught.value.errno == errno.ENOENT, (_pass, name, caught.value)
            assert os.stat(root + b"/d/ok.jpg").st_size == 1
            assert os.stat(root + b"/" + os.fsencode(DEEP) + b"/f").st_size == 1
            os.listdir(root + b"/d")
