"""Liveness, metrics and "who am I"."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse

from datahub.api.deps import PrincipalDep, ServicesDep, get_principal
from datahub.api.metrics import cache_text, warmups_text
from datahub.api.schemas import TokenPublic
from datahub.errors import Unauthenticated

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Answers as long as the process serves requests (no authentication)."""
    return {"status": "ok"}


def _scraper(request: Request, services: ServicesDep) -> None:
    """Under ``--auth``, 401 unless the request carries a valid API token (any principal), or
    ``api.metrics_public`` is set.

    Why: the figures name every route's traffic, each mount sharing this home with the bucket
    URL it warms (``warmups_text``) and the cache's size; served to anyone who reached the port,
    they told an unauthenticated caller what the deployment holds. Local mode answers this
    machine's callers only (``local_mode.py``), as for every route."""
    config = services.config.api
    if config.local_mode or config.metrics_public:
        return
    try:
        get_principal(request, services)
    except Unauthenticated as exc:
        raise Unauthenticated(
            f"/metrics needs an API token on a server with authentication ({exc.message}); give the "
            "scraper one (Prometheus: authorization.credentials_file), or set api.metrics_public = true "
            "to serve it to anyone who reaches the port"
        ) from None


@router.get("/metrics", response_class=PlainTextResponse, dependencies=[Depends(_scraper)])
def metrics(request: Request, services: ServicesDep) -> str:
    """Prometheus text: request counters, the cache's figures when a cache is attached, and
    the background warm-ups of the mounts sharing this home."""
    return (
        request.app.state.metrics.prometheus_text()
        + cache_text(services.cache)
        + warmups_text(services.config)
    )


@router.get("/v1/whoami")
def whoami(principal: PrincipalDep) -> TokenPublic:
    return TokenPublic(principal=principal.name, is_admin=principal.is_admin)
