"""`datahub serve` builds one app: the API, LabelX under /labelx, and one cache behind both."""

from fastapi.testclient import TestClient

from datahub.catalog import open_catalog
from datahub.cli.serve_cmd import build_app
from datahub.storage import StoreRegistry

# a local-mode app answers only requests addressed to this machine (datahub/api/local_mode.py)
LOCAL = "http://127.0.0.1"


def test_serve_mounts_labelx_and_exposes_cache_metrics(config):
    catalog = open_catalog(config.resolved_catalog_url)
    stores = StoreRegistry(config)
    app, cache = build_app(config, catalog, stores)
    try:
        with TestClient(app, base_url=LOCAL) as client:
            assert client.get("/healthz").status_code == 200
            login = client.get("/labelx/login")
            assert login.status_code == 200 and "<form" in login.text
            metrics = client.get("/metrics").text
            assert "datahub_cache_used_bytes" in metrics and "datahub_http_requests_total" in metrics
        plain, plain_cache = build_app(config, catalog, stores, labelx=False)
        plain_cache.close()
        assert TestClient(plain, base_url=LOCAL).get("/labelx/login").status_code == 404
    finally:
        cache.close()
        stores.close()
        catalog.close()
