"""Liveness, metrics and "who am I"."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from datahub.api.deps import PrincipalDep, ServicesDep
from datahub.api.metrics import cache_text, warmups_text
from datahub.api.schemas import TokenPublic

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Answers as long as the process serves requests (no authentication)."""
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
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
