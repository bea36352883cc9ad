"""sec24: ``/metrics`` under ``--auth`` needs a token, unless ``api.metrics_public`` says not.
sec25: and not just any token: a global admin's, or one of a principal in ``api.metrics_principals``.

It was open to anyone who reached the port, and then to any valid token, and its figures name
every route's traffic, the cache's size and each mount sharing the home (its mount point names a
dataset or workspace) with the bucket it warms (docs/api.md)."""

from __future__ import annotations

import pytest

from datahub.api import create_app
from datahub.api.tokens import issue_token
from datahub.config import Config
from datahub.errors import InvalidName
from tests.api.conftest import Api, api_for


def test_metrics_need_a_token_under_auth(api: Api) -> None:
    api.get("/v1/datasets/pets", "alice")
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic eDp5"}):
        refused = api.client.get("/metrics", headers=headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert refused.headers["www-authenticate"] == "Bearer"
        error = refused.json()["error"]
        assert error["code"] == "unauthenticated", error
        assert (
            "/metrics needs an API token" in error["message"]
            and "api.metrics_public = true" in error["message"]
        )
        assert "datahub_http_requests_total" not in refused.text
    scraped = api.get("/metrics", "admin")  # a global admin sees every dataset anyway
    assert scraped.status_code == 200, scraped.text
    assert 'route="/v1/datasets/{name}",status="200"} 1' in scraped.text


def test_metrics_refuse_a_token_that_is_neither_admin_nor_listed(api: Api) -> None:
    """sec25: eve holds no role anywhere, alice reads pets, owner owns it: none of them is the
    scraper, so none reads the figures of every mount of the node (403 naming the setting)."""
    for who in ("eve", "alice", "bob", "owner"):
        refused = api.get("/metrics", who)
        assert refused.status_code == 403, (who, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "access_denied", error
        assert "api.metrics_principals" in error["message"] and repr(who) in error["message"], error
        assert "datahub_http_requests_total" not in refused.text


def test_metrics_principals_name_the_scraper(config: Config) -> None:
    config.api.metrics_principals = "prometheus  eve"
    with api_for(config) as api:
        scraper = issue_token(api.catalog.store, "prometheus")[0]
        scraped = api.client.get("/metrics", headers={"Authorization": f"Bearer {scraper}"})
        assert scraped.status_code == 200 and "datahub_http_requests_total" in scraped.text
        assert api.get("/metrics", "eve").status_code == 200
        assert api.get("/metrics", "alice").status_code == 403
        # the scraper's principal is no role anywhere: the API is still closed to it
        hidden = api.client.get("/v1/datasets/pets", headers={"Authorization": f"Bearer {scraper}"})
        assert hidden.status_code == 404


def test_a_bad_metrics_principal_stops_the_start(config: Config) -> None:
    config.api.metrics_principals = "prometheus <script>"
    with pytest.raises(InvalidName, match="invalid principal '<script>'"):
        create_app(config)


def test_metrics_public_serves_them_without_a_token(config: Config) -> None:
    config.api.metrics_public = True
    with api_for(config) as api:
        scraped = api.client.get("/metrics")
        assert scraped.status_code == 200 and "datahub_http_requests_total" in scraped.text
        # the opt-out is about /metrics alone: the API still needs its token
        assert api.client.get("/v1/datasets").status_code == 401


def test_metrics_public_is_a_setting_off_by_default(tmp_path) -> None:
    from datahub.config import load_config

    assert load_config(env={}).api.metrics_public is False
    assert load_config(env={"DATAHUB_API_METRICS_PUBLIC": "true"}).api.metrics_public is True
    toml = tmp_path / "datahub.toml"
    toml.write_text("[api]\nmetrics_public = true\n")
    assert load_config(toml, env={}).api.metrics_public is True
    assert load_config(env={}).api.metrics_principals == ""
    assert (
        load_config(env={"DATAHUB_API_METRICS_PRINCIPALS": "prometheus"}).api.metrics_principals
        == "prometheus"
    )
