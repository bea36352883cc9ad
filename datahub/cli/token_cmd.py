"""``datahub token create|list|revoke``: API bearer tokens (the secret is shown once, stored hashed).

A token's id is the SHA-256 of its secret: what the catalog keeps, what ``list`` shows and what
``revoke`` takes. The secret itself is never shown again and never listed (the id cannot be
turned back into it). ``revoke -`` reads a secret from stdin, because a secret in the command
line is readable by every local user (/proc/PID/cmdline, ``ps``) while the command runs, and
stays in the shell's history: if the revoke then fails (a wrong catalog, a typo), the secret
is still live and now exposed (gaps26).
"""

from __future__ import annotations

import argparse

from datahub.console.context import CliContext
from datahub.console.token_arg import token_argument

LIST_COLUMNS = ("principal", "id", "admin", "description", "created")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("token", help="create, list or revoke API tokens")
    tsub = p.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    c = tsub.add_parser("create", help="issue a token (printed once; store it safely)")
    c.add_argument("--principal", required=True, help="who the token acts as (used in dataset access lists)")
    c.add_argument("--admin", action="store_true", help="global admin: every role on every dataset")
    c.add_argument("--description", default="", help="what the token is for (shown by token list)")
    c.set_defaults(func=create, creates_catalog=True)
    ls = tsub.add_parser(
        "list",
        help="every token: principal, id, admin, description, created (never a secret)",
        description="The id is what 'token revoke' takes. Secrets are stored only as their "
        "SHA-256 (the id), so no command can show one again.",
    )
    ls.add_argument("--principal", help="only this principal's tokens")
    ls.set_defaults(func=list_)
    r = tsub.add_parser(
        "revoke",
        help="revoke a token by its id (see 'token list') or by its secret read from stdin ('-')",
        description="Give the id 'token create' printed or 'token list' shows, or '-' to read the "
        "secret (dh_…) from stdin: a secret given as an argument is readable by every local user "
        "while the command runs (ps, /proc/PID/cmdline) and stays in the shell's history.",
    )
    r.add_argument("token", metavar="ID|-", help="the token's id, or - to read its secret or id from stdin")
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


def list_(args: argparse.Namespace, ctx: CliContext) -> int:
    """Every token with what identifies it; never a secret (the store has none to show)."""
    rows = [
        {
            "principal": info.principal,
            "id": info.token_hash,
            "admin": info.is_admin,
            "description": info.description,
            "created": info.created_at or None,
        }
        for info in ctx.catalog.store.list_tokens()
        if args.principal is None or info.principal == args.principal
    ]
    ctx.emit(rows, columns=LIST_COLUMNS)
    return 0


def revoke(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.api.tokens import TOKEN_PREFIX, revoke_token

    given = token_argument(
        args.token,
        prefix=TOKEN_PREFIX,
        command="datahub token revoke",
        list_command="datahub token list",
        program=ctx.command,
        err=ctx.err,
    )
    info = revoke_token(ctx.catalog.store, given)
    ctx.emit(
        {"revoked": info.token_hash, "principal": info.principal},
        text=f"revoked token {info.token_hash} of {info.principal}",
    )
    return 0
