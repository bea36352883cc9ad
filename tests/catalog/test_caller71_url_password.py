"""A catalog URL's password never shows in an error (caller71).

A catalog URL may carry a password (``mongodb://user:PASSWORD@host/db``, an API behind a
proxy's basic auth). A scheme mistyped (``mongo://``) was refused as ``unsupported catalog URL
'mongo://user:PASSWORD@host/db'``, and every error of the remote client named its server as
given, password included. The CSI node plugin opens the catalog at each NodePublishVolume and
starts without checking the URL, so that message was the publish's error, which the kubelet
puts in the pod's events, where the users of the pod's namespace read it. Now such a URL is
shown with ``****`` for its password.
"""

from __future__ import annotations

import socket

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import CatalogUnavailable, InvalidInput

PASSWORD = "S3cr3t-catalog-pw"


@pytest.mark.parametrize(
    "url",
    [
        f"mongo://datahub:{PASSWORD}@db.internal:27017/datahub",
        f"mongodb:/datahub:{PASSWORD}@db.internal/datahub",
        f"postgres://datahub:{PASSWORD}@db.internal/datahub",
    ],
)
def test_an_unsupported_catalog_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        open_catalog(url)
    shown = [caught.value.message, str(caught.value.details)]
    assert not [text for text in shown if PASSWORD in text], caught.value.message
    assert "unsupported catalog URL" in caught.value.message


def test_a_remote_catalogs_errors_name_its_server_without_the_password() -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://node:{PASSWORD}@127.0.0.1:{port}"
    store = HttpCatalogStore(url, token="dh_unused", attempts=1, backoff=0.0, budget=2.0)
    try:
        with pytest.raises(CatalogUnavailable) as caught:
            store.head("pets")
        texts = [caught.value.message, str(caught.value.details), repr(store), str(store.url)]
        assert not [text for text in texts if PASSWORD in text], caught.value.message
        assert f"http://node:****@127.0.0.1:{port}" in caught.value.message
    finally:
        store.close()
