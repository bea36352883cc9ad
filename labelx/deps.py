"""What every LabelX route depends on: the app's services and the caller (bodies: labelx.models).

``Who`` authenticates (API token or session cookie) and enforces CSRF on every
state-changing request, so no route can forget either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi import Path as PathParam

from datahub.config import Config
from datahub.errors import Unauthenticated
from datahub.web.cookies import cookie_values, held_name
from datahub.web.images import ImageSource
from labelx.auth import CSRF_HEADER, Auth, Principal, check_csrf
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
        self.service = LabelService(self.store, catalog, dataset_acl=not config.api.local_mode)
        self.auth = Auth(self.store)
        self.images = ImageSource(config.home_path / "labelx" / "previews", cache=cache, stores=stores)
        self.secure_cookies = secure_cookies
        # the command the pages name (the dashboard's preannotate line): an installed datahub
        # is on the reader's PATH; ``make run`` serves from a checkout's .venv, which is not,
        # and sets its own, as it does for the dataset browser's (datahub.demo)
        self.cli = "datahub"


def demo_password_path(config: Config) -> Path:
    """Where ``make run`` keeps the first admin's random password (0600, under the home): the
    login page names it while it exists, so a new user of the demo is never stuck at the form."""
    return config.home_path / "labelx-admin-password"


def get_labelx(request: Request) -> LabelX:
    return request.app.state.labelx


def get_principal(request: Request) -> Principal:
    lx = get_labelx(request)
    principal = lx.auth.from_bearer(request.headers.get("authorization"))
    if principal is None:
        # this labelx.db's own name (another LabelX on the host has its own), __Host- when Secure
        name = held_name(request, lx.auth.session_cookie, always=lx.secure_cookies)
        sessions = {v for v in cookie_values(request, name) if lx.auth.ours(v)}
        if len(sessions) > 1:  # one was written by a page of another port (the app expires both)
            raise Unauthenticated(
                "two LabelX session cookies came with this request (a page of another site on this "
                "host may have set one): log in again"
            )
        principal = lx.auth.from_session(next(iter(sessions), None))
    if principal is None:
        raise Unauthenticated("log in first (or send an API token as 'Authorization: Bearer ...')")
    if request.method not in SAFE_METHODS:
        check_csrf(principal, request.headers.get(CSRF_HEADER))
    return principal


LX = Annotated[LabelX, Depends(get_labelx)]
# ids are SQLite INTEGERs: a larger number is bad input (400), never an overflow deep in a query
RowId = Annotated[int, PathParam(ge=-(2**53 - 1), le=2**53 - 1)]  # exact as JSON numbers too
Who = Annotated[Principal, Depends(get_principal)]
