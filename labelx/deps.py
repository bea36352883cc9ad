"""What every LabelX route depends on: the app's services, the caller, the JSON body.

``Who`` authenticates (API token or session cookie) and enforces CSRF on every
state-changing request, so no route can forget either.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request

from datahub.config import Config
from datahub.errors import InvalidInput, PayloadTooLarge, Unauthenticated
from labelx.auth import CSRF_HEADER, SESSION_COOKIE, Auth, Principal, check_csrf
from labelx.images import ImageSource
from labelx.service import LabelService
from labelx.store import LabelStore

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def labelx_db_path(config: Config) -> Path:
    """One place decides where LabelX keeps its state: ``<home>/labelx.db``."""
    return config.home_path / "labelx.db"


class LabelX:
    """Everything one app instance holds; built once, reached through ``request.app.state``."""

    def __init__(self, config: Config, catalog: Any, stores: Any, cache: Any, secure_cookies: bool) -> None:
        self.config = config
        self.store = LabelStore(labelx_db_path(config))
        self.service = LabelService(self.store, catalog)
        self.auth = Auth(self.store)
        self.images = ImageSource(config.home_path / "labelx" / "previews", cache=cache, stores=stores)
        self.secure_cookies = secure_cookies
        self.max_body = config.api.max_body_bytes


def get_labelx(request: Request) -> LabelX:
    return request.app.state.labelx


def get_principal(request: Request) -> Principal:
    lx = get_labelx(request)
    principal = lx.auth.from_bearer(request.headers.get("authorization")) or lx.auth.from_session(
        request.cookies.get(SESSION_COOKIE)
    )
    if principal is None:
        raise Unauthenticated("log in first (or send an API token as 'Authorization: Bearer ...')")
    if request.method not in SAFE_METHODS:
        check_csrf(principal, request.headers.get(CSRF_HEADER))
    return principal


LX = Annotated[LabelX, Depends(get_labelx)]
Who = Annotated[Principal, Depends(get_principal)]


async def json_body(request: Request) -> dict[str, Any]:
    lx = get_labelx(request)
    body = await request.body()
    if len(body) > lx.max_body:
        raise PayloadTooLarge(f"request body is larger than {lx.max_body} bytes")
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise InvalidInput(f"request body is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise InvalidInput("request body must be a JSON object")
    return data


Body = Annotated[dict[str, Any], Depends(json_body)]


def int_field(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"field {name!r} must be an integer")
    return value
