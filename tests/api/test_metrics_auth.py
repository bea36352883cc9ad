"""sec24: ``/metrics`` under ``--auth`` needs a token, unless ``api.metrics_public`` says not.

It was open to anyone who reached the port, and its figures name every route's traffic, the
cache's size and each mount sharing the home with the bucket it warms (docs/api.md)."""

from __future__ import annotations

from datahub.config import Config
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
    for who in ("eve", "admin"):  # any valid token: eve holds no role anywhere
        scraped = api.get("/metrics", who)
        assert scraped.status_code == 200, scraped.text
        assert 'route="/v1/datasets/{name}",status="200"} 1' in scraped.text


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
