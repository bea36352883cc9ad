"""Liveness, metrics and "who am I"."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse

from datahub.api.deps import PrincipalDep, ServicesDep, get_principal
from datahub.api.metrics import cache_text, warmups_text
from datahub.api.schemas import TokenPublic
from datahub.errors import AccessDenied, InvalidName, Unauthenticated
from datahub.validation import check_principal

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Answers as long as the process serves requests (no authentication)."""
    return {"status": "ok"}


def metrics_readers(setting: str) -> frozenset[str]:
    """The principals of ``api.metrics_principals`` (space-separated), each checked as an
    access list's principal is, so a typo stops the start instead of refusing the scraper."""
    try:
        return frozenset(check_principal(name) for name in setting.split())
    except InvalidName as exc:
        raise InvalidName(
            f"setting api.metrics_principals: {exc.message}", setting="api.metrics_principals"
        ) from None


def _scraper(request: Request, services: ServicesDep) -> None:
    """Under ``--auth``, 401 without a valid API token and 403 unless the token is a global
    admin's or its principal is in ``api.metrics_principals``; ``api.metrics_public`` opens it.

    Why: the figures name each mount sharing this home (its mount point: a dataset's or a
    workspace's) and the bucket URL it warms (``warmups_text``), every route's traffic and the
    cache's size. Served to anyone who reached the port (before sec24), or to any valid token
    (sec24: a token with no role anywhere read them), they told a tenant what the other
    tenants' mounts hold. Global admins see every dataset anyway; a scraper gets a principal
    of its own, listed in the setting, so it needs no admin token (which could write
    everything). Local mode answers this machine's callers only (``local_mode.py``), as for
    every route."""
    config = services.config.api
    if config.local_mode or config.metrics_public:
        return
    try:
        principal = get_principal(request, services)
    except Unauthenticated as exc:
        raise Unauthenticated(
            f"/metrics needs an API token on a server with authentication ({exc.message}); give the "
            "scraper a token of a principal listed in api.metrics_principals (Prometheus: "
            "authorization.credentials_file), or set api.metrics_public = true to serve it to anyone "
            "who reaches the port"
        ) from None
    if principal.is_admin or principal.name in metrics_readers(config.metrics_principals):
        return
    raise AccessDenied(
        f"{principal.name!r} may not read /metrics: its figures name every mount's dataset or workspace and "
        "bucket, so only global admins and the principals in api.metrics_principals read them; add "
        f"{principal.name!r} to api.metrics_principals if it is the scraper",
        principal=principal.name,
        setting="api.metrics_principals",
    )


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
