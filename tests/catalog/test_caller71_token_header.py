"""The API token a remote client sends never shows in an error (caller71).

A token that an ``Authorization`` header cannot carry as it is, most often with the newline a
Kubernetes Secret made from a file keeps (``kubectl create secret --from-file``), made httpx
refuse the request with ``LocalProtocolError: Illegal header value b'Bearer dh_…\\n'``: the
client retried that as an unreachable server and reported it in CatalogUnavailable, the whole
token quoted. Through the CSI node plugin that message is its NodePublishVolume error, which
the kubelet puts in the pod's events, where the namespace's users read the node's token. Now
surrounding whitespace is dropped (the server strips it too), and any other character no
header may carry is refused at once, naming ``$DATAHUB_API_TOKEN`` and never the token.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from datahub.catalog import Catalog, open_store
from datahub.errors import DatahubError, InvalidInput
from tests.catalog.remote import ServedStore

FAST = SimpleNamespace(retry_attempts=2, retry_backoff=0.01, retry_budget=5.0)  # a RetrySchedule


@pytest.fixture
def served(tmp_path: Path, shared_api) -> Iterator[ServedStore]:
    store = shared_api.store(tmp_path)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize("around", ["{}\n", "{}\r\n", " {} ", "\t{}\n\n"])
def test_a_token_with_whitespace_around_it_is_that_token(
    served: ServedStore, monkeypatch: pytest.MonkeyPatch, around: str
) -> None:
    """What a Secret made from a file (or a copy from a terminal) gives: it opens the catalog."""
    monkeypatch.setenv("DATAHUB_API_TOKEN", around.format(served.token))
    store = open_store(served.url, retry=FAST)
    try:
        Catalog(store).create_dataset("from-a-secret-file")
        assert [d.name for d in Catalog(store).list_datasets()] == ["from-a-secret-file"]
    except DatahubError as exc:
        assert served.token not in exc.message, f"the token is in the error: {exc.message}"
        raise
    finally:
        store.close()


@pytest.mark.parametrize("cut", ["{}\x01", "{}\x7f", "{}\x1b[0m", "{0}\n{0}", "{}é", "dh_ {}"])
def test_a_token_no_header_may_carry_is_refused_without_showing_it(
    served: ServedStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, cut: str
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = served.token
    monkeypatch.setenv("DATAHUB_API_TOKEN", cut.format(secret))
    with pytest.raises(BaseException) as caught:
        store = open_store(served.url, retry=FAST)
        try:
            store.head("anything")
        finally:
            store.close()
    texts = [str(caught.value), repr(caught.value), str(getattr(caught.value, "details", ""))]
    texts += [r.getMessage() for r in caplog.records]
    assert not [t for t in texts if secret in t], f"the token is shown: {caught.value}"
    assert isinstance(caught.value, InvalidInput), repr(caught.value)
    assert "$DATAHUB_API_TOKEN" in caught.value.message and "not shown" in caught.value.message
