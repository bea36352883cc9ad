"""API tokens: random, shown once, stored only as their SHA-256 (promise 5).

No FastAPI here, so the CLI (``datahub token create``) issues tokens without the web stack.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

from datahub.catalog.model import TokenInfo
from datahub.catalog.store import CatalogStore
from datahub.errors import NotFound
from datahub.validation import check_principal

TOKEN_PREFIX = "dh_"
# the command that makes a token, in backticks: a message naming it shows it as this server's
# user runs datahub (``datahub.api.errors.as_run``). They said a bare 'datahub token create',
# "command not found" after ``make run``, and without the --principal it needs (newuser72)
TOKEN_COMMAND = "`datahub token create --principal NAME`"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_token(
    store: CatalogStore,
    principal: str,
    *,
    admin: bool = False,
    description: str = "",
    clock: Callable[[], float] = time.time,
) -> tuple[str, TokenInfo]:
    """Create a token for ``principal``; returns (secret shown once, stored info)."""
    check_principal(principal)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    info = TokenInfo(hash_token(secret), principal, admin, clock(), description)
    store.put_token(info)
    return secret, info


def revoke_token(store: CatalogStore, token_or_hash: str) -> TokenInfo:
    """Revoke by the secret itself or by its hash (the id ``token create`` prints)."""
    digest = hash_token(token_or_hash) if token_or_hash.startswith(TOKEN_PREFIX) else token_or_hash
    info = store.get_token(digest)
    if info is None:
        raise NotFound(f"no such token {digest[:12]}…: it was never issued or is already revoked")
    store.delete_token(digest)
    return info


def lookup_token(store: CatalogStore, token: str) -> TokenInfo | None:
    return store.get_token(hash_token(token))
