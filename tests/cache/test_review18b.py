"""review18b: attacks on blobs17's self-verifying reads (``datahub.cache.selfverify``) after
the lead's ``own_blob`` (a blob of the objects store only).

Any writer may commit a record naming a platform blob with any etag (the hash is the
capability, docs/api.md "Record URLs"), and a blob replaced several times leaves records of
several lost etags. The whole-blob hash was remembered per (URL, *record* etag), so every
further etag, made up or lost, read and hashed the whole blob again: N records cost N whole
reads, and a record claiming a few bytes of a multi-GB blob cost the whole blob each time
before the length check refused it (the cost shortrec15 removed from plain reads). The bytes
under a blob's current etag do not depend on which record asks, so their verdict is kept per
(URL, current etag): one whole read per blob version.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from datahub.cache import open_cache, selfverify
from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from tests.cache.conftest import with_cache
from tests.cache.test_integrity15 import PAGE, READS

SIZE = 3 * PAGE + 5


def test_records_of_many_etags_of_one_blob_hash_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight records of one blob under eight etags it never had (made up, as any writer may,
    or lost to replacements): each reads the blob's bytes. Then eight records claiming 10
    bytes of it: each is refused (the blob is longer). The blob is read whole once in all."""
    hashed: list[str] = []
    real_hash = selfverify._hashes_to

    def counted(*args: object) -> bool | None:  # the real hash, counted
        hashed.append(str(args[2]))
        return real_hash(*args)

    monkeypatch.setattr(selfverify, "_hashes_to", counted)
    root = (tmp_path / "objects").as_uri()  # the objects store: only its blobs verify themselves
    config = load_config(env={}, overrides={"home": str(tmp_path / "var"), "objects_url": root})
    config = with_cache(config, page_size=PAGE, ram_bytes=1 << 20, disk_bytes=1 << 20, **READS["pages"])
    data = random.Random(181).randbytes(SIZE)
    with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
        store = registry.store(root)
        key = blob_key(hashlib.sha256(data).hexdigest())
        store.put(key, data)
        url = store.url_for(key)
        for i in range(8):
            assert cache.read(ObjectRef(url, f'"{i:032x}"', SIZE), 0, PAGE) == data[:PAGE]
        for i in range(8, 16):
            with pytest.raises(ObjectChanged):
                cache.read(ObjectRef(url, f'"{i:032x}"', 10))
    assert len(hashed) == 1, f"the blob was read whole {len(hashed)} times"
