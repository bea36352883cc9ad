"""``datahub token create|revoke``: API bearer tokens (the secret is shown once, stored hashed)."""

from __future__ import annotations

import argparse

from datahub.console.context import CliContext


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("token", help="create or revoke API tokens")
    tsub = p.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    c = tsub.add_parser("create", help="issue a token (printed once; store it safely)")
    c.add_argument("--principal", required=True, help="who the token acts as (used in dataset access lists)")
    c.add_argument("--admin", action="store_true", help="global admin: every role on every dataset")
    c.add_argument("--description", default="")
    c.set_defaults(func=create, creates_catalog=True)
    r = tsub.add_parser("revoke", help="revoke a token by its secret or its id")
    r.add_argument("token", help="the secret (dh_…) or the id printed by 'token create'")
    r.set_defaults(func=revoke)


def create(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.api.tokens import issue_token

    secret, info = issue_token(
        ctx.catalog.store, args.principal, admin=args.admin, description=args.description
    )
    ctx.emit(
        {"token": secret, "id": info.token_hash, "principal": info.principal, "admin": info.is_admin},
        text=f"{secret}\n(principal {info.principal}{', global admin' if info.is_admin else ''}; "
        f"id {info.token_hash}; shown once, store it safely)",
    )
    return 0


def revoke(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.api.tokens import revoke_token

    info = revoke_token(ctx.catalog.store, args.token)
    ctx.emit(
        {"revoked": info.token_hash, "principal": info.principal}, text=f"revoked token of {info.principal}"
    )
    return 0
