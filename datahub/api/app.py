"""``create_app(config)``: the FastAPI application, built at the entry point (``datahub serve``).

Layers, outermost first: request metrics, local mode's refusal of web pages
(``local_mode.py``), the caller of an API request with a body (``early_auth.py``), the body limits (413 size, 408 read deadline,
503 in-flight budget, all before any endpoint runs), FastAPI routing with one error shape.
Whatever services the app opened itself are closed when it shuts down; services passed in
belong to the caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import Schema
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

import datahub
from datahub.api.body_depth import MAX_BODY_DEPTH
from datahub.api.deps import Services
from datahub.api.early_auth import CallerBeforeBody
from datahub.api.errors import install_error_handlers
from datahub.api.limits import add_body_limits
from datahub.api.local_mode import LocalCallersOnly
from datahub.api.metrics import MetricsMiddleware, RequestMetrics
from datahub.api.record_urls import server_sources
from datahub.api.routes import ROUTERS
from datahub.api.routes.system import metrics_readers
from datahub.api.schemas import CommitCreate, ErrorBody
from datahub.config import Config
from datahub.web.apidocs import add_api_docs

DESCRIPTION = """Versioned datasets over object storage.

Authentication: `Authorization: Bearer <token>` (create one with `datahub token create`),
unless the server runs in local mode (loopback only). Errors always have the shape
`{"error": {"code", "message", "details"}}`; see docs/api.md for the codes.

Request bodies are typed strictly: an `integer` is a whole JSON number (`7`, or `7.0` as JSON
Schema counts it; never `7.5`, `"7"` or `true`), a `string` is never a number, and unknown
fields are refused (422)."""

_ERRORS = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        400: "invalid input (name, key, filter, cursor); also a body nested deeper than "
        f"{MAX_BODY_DEPTH} levels or is not UTF-8 JSON (refused before it is parsed)",
        401: "unauthenticated",
        403: "the caller may read the dataset but lacks the role this needs",
        404: "unknown dataset, version, tag or record (a dataset the caller may not read is unknown)",
        408: "request body not received within api.body_read_timeout",
        409: "conflict (stale base, name taken)",
        413: "request body larger than api.max_body_bytes",
        422: "request does not match the schema",
        503: "busy: too many request bodies in flight (api.max_inflight_body_bytes), or the catalog is busy "
        "with other commits (nothing was written); send it again after Retry-After seconds",
    }.items()
}


def create_app(config: Config, *, catalog=None, stores=None, cache=None, tasks=None) -> FastAPI:
    server_sources(config.api.commit_sources)  # a bad setting stops the start, not each commit
    metrics_readers(config.api.metrics_principals)  # likewise: not a scraper refused at every scrape
    services = Services(config, catalog=catalog, stores=stores, cache=cache, tasks=tasks)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            services.close()

    app = FastAPI(
        title="datahub",
        version=datahub.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        responses=_ERRORS,
        docs_url=None,  # FastAPI's pages load Swagger UI from a CDN: served from here instead
        redoc_url=None,
    )
    add_api_docs(app, title="datahub", docs_url="/docs", openapi_url=app.openapi_url)
    app.state.services = services
    app.state.metrics = RequestMetrics()
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    add_body_limits(app, config)  # one budget per app, i.e. per server process
    # before the body limits: an API request's token is checked before its body is held (early_auth.py)
    app.add_middleware(CallerBeforeBody)
    # before any body is read: in local mode, what a web page sent is refused (local_mode.py)
    app.add_middleware(LocalCallersOnly, config=config)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    _document_models(app, [CommitCreate])
    return app


def _document_models(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Request models a route parses itself (the streamed commit body) still get their schemas
    under ``components``, where the route's ``requestBody`` refers to them."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = generate()
            _, defs = models_json_schema(
                [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
            )
            schema.setdefault("components", {}).setdefault("schemas", {}).update(
                # the same normalisation FastAPI applies to the schemas it generates itself
                {
                    name: jsonable_encoder(Schema.model_validate(d), by_alias=True, exclude_none=True)
                    for name, d in defs.get("$defs", {}).items()
                }
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
