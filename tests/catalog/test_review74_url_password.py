"""review74: a catalog URL's password typed unescaped still showed in errors (after caller71).

caller71 writes a catalog URL's password as ``****`` in every error naming the URL, but its
rule ended the password at the first "/", "?" or "#". A generated password holds such
characters (base64 has "/"), and a URL typed with one unescaped is exactly the URL that fails:
``unsupported catalog URL 'mongo://datahub:S3cr3t/…@db/datahub'`` showed it whole, and the
clients' own refusals quoted pieces of it (httpx's ``Invalid port: 'S3cr3t'``, raised bare;
pymongo's ``Bad database name "…"``, or a bare ValueError). The CSI node plugin's publish
error, where such a message lands, is read in the pod's events by the namespace's users.
"""

from __future__ import annotations

import re

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import InvalidInput

PASSWORD = "S3cr3t/Catalog?Pw#Key@Part"  # unescaped, as pasted from a password manager
PIECES = [piece for piece in re.split(r"[/?#@]", PASSWORD) if piece]


def leaked(texts: list[str]) -> list[str]:
    """The password's pieces any of ``texts`` shows."""
    return [piece for piece in PIECES for text in texts if piece in text]


@pytest.mark.parametrize(
    "url",
    [
        f"mongo://datahub:{PASSWORD}@db.internal:27017/datahub",  # a scheme mistyped
        f"mongodb://datahub:{PASSWORD}@db.internal:27017/datahub",
        f"mongodb://datahub:{PASSWORD.split('#')[0]}@db.internal/datahub",  # "Bad database name"
        f"http://node:{PASSWORD}@127.0.0.1:9",
    ],
    ids=["unsupported", "mongodb", "mongodb-path", "http"],
)
def test_an_unescaped_password_never_shows_in_the_refusal(url: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        open_catalog(url).store.head("pets")
    said = refused.value.message
    assert not leaked([said, str(refused.value.details)]), said
    assert ":****@" in said, said
    if not url.startswith("mongo://"):  # what to do about it
        assert "percent-escaped" in said and "%2F" in said, said


def test_a_remote_store_names_such_a_url_without_the_password() -> None:
    # a password starting with digits before its "/": httpx reads them as a port, and the
    # client's messages name the server as ``store.url``
    url = "http://node:12/Secret@127.0.0.1:9"
    store = HttpCatalogStore(url, token="dh_unused", attempts=1)
    try:
        assert store.url == "http://node:****@127.0.0.1:9" and "Secret" not in repr(store), store.url
    finally:
        store.close()
