"""``datahub dataset create|list|show|update``."""

from __future__ import annotations

import argparse

from datahub.console.context import CliContext
from datahub.errors import InvalidInput
from datahub.validation import check_principal

COLUMNS = ("name", "head", "owner", "description", "source")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dataset", help="create, list, show and update datasets")
    dsub = p.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)

    c = dsub.add_parser("create", help="create an empty dataset")
    c.add_argument("name", help="the new dataset's name (letters, digits, . _ -)")
    c.add_argument("--description", default="", help="a line saying what the dataset holds")
    c.add_argument("--source", default="", help="default source URL for imports")
    c.add_argument("--owner", default="", help="principal that administers the dataset")
    c.add_argument(
        "--acl", action="append", default=[], metavar="PRINCIPAL=ROLE", help="grant a role (repeat)"
    )
    c.set_defaults(func=create, creates_catalog=True)

    ls = dsub.add_parser("list", help="all datasets")
    ls.set_defaults(func=list_)

    s = dsub.add_parser("show", help="one dataset and its head")
    s.add_argument("name", help="the dataset's name")
    s.set_defaults(func=show)

    u = dsub.add_parser(
        "update", help="change description/source/owner, grant/revoke roles, add/remove sources"
    )
    u.add_argument("name", help="the dataset's name")
    u.add_argument("--description", help="replace the description")
    u.add_argument("--source", help="replace the default source URL for imports")
    u.add_argument("--owner", help="replace the principal that administers the dataset")
    u.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="PRINCIPAL=ROLE",
        help="give PRINCIPAL a role: reader, writer or admin (repeat)",
    )
    u.add_argument(
        "--revoke",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="take PRINCIPAL's role away (repeat)",
    )
    u.add_argument(
        "--add-source",
        action="append",
        default=[],
        metavar="PREFIX",
        help="global admins: let writers commit record URLs under PREFIX (s3://bucket/team/)",
    )
    u.add_argument(
        "--remove-source",
        action="append",
        default=[],
        metavar="PREFIX",
        help="global admins: stop letting writers commit record URLs under PREFIX",
    )
    u.set_defaults(func=update)


def parse_grants(items: list[str]) -> dict[str, str]:
    from datahub.api.access import check_role

    acl = {}
    for item in items:
        principal, sep, role = item.partition("=")
        if not sep or not principal:
            raise InvalidInput(
                f"invalid access entry {item!r}: use PRINCIPAL=ROLE, e.g. alice=writer or *=reader"
            )
        acl[principal if principal == "*" else check_principal(principal)] = check_role(role)
    return acl


def _public(ctx: CliContext, dataset) -> dict:
    from datahub.catalog.public import dataset_row

    return dataset_row(dataset, ctx.catalog.store.head(dataset.name))


def _owner(owner: str | None) -> str | None:
    """The API's rule for an owner, here too: a name no token could ever carry owns nothing."""
    return check_principal(owner) if owner else owner


def create(args: argparse.Namespace, ctx: CliContext) -> int:
    _owner(args.owner)
    dataset = ctx.catalog.create_dataset(
        args.name, args.description, args.source, args.owner, parse_grants(args.acl)
    )
    ctx.emit(_public(ctx, dataset))
    return 0


def list_(args: argparse.Namespace, ctx: CliContext) -> int:
    ctx.emit([_public(ctx, d) for d in ctx.catalog.list_datasets()], columns=COLUMNS)
    return 0


def show(args: argparse.Namespace, ctx: CliContext) -> int:
    ctx.emit(_public(ctx, ctx.catalog.get_dataset(args.name)))
    return 0


def _not_held(name: str, relation: str, given, held, shown: list[str]) -> str | None:
    """A note naming each of ``given`` (a ``--revoke`` principal, a ``--remove-source``
    prefix) that ``held`` lacks, with what the dataset holds, or None. Why: a mistyped
    ``--revoke alcie`` printed the dataset, exit 0, and nothing said alice kept her role
    (newuser36). A note, not a refusal: revoking is never refused (a name the principal rules
    no longer accept must stay removable, tests/cli/test_principals.py), and a script's
    revoke of what is already gone must go on working."""
    missing = sorted(g for g in given if g not in held)
    if not missing:
        return None
    has = ", ".join(shown) if shown else "none"
    return (
        f"note: {', '.join(map(repr, missing))} {relation} dataset {name!r} (it has: {has}): "
        "nothing to remove there; check the spelling"
    )


def update(args: argparse.Namespace, ctx: CliContext) -> int:
    catalog = ctx.catalog
    fields = {k: getattr(args, k) for k in ("description", "source", "owner") if getattr(args, k) is not None}
    _owner(fields.get("owner"))
    notes: list[str | None] = []
    if args.grant or args.revoke:
        held = dict(catalog.get_dataset(args.name).acl)
        notes.append(
            _not_held(args.name, "holds no role on", args.revoke, held, [f"{p}={r}" for p, r in held.items()])
        )
        acl = held | parse_grants(args.grant)
        for principal in args.revoke:
            acl.pop(principal, None)
        fields["acl"] = acl
    if args.add_source or args.remove_source:
        from datahub.catalog.sources import check_sources

        removed = set(check_sources(args.remove_source, args.name))
        now = check_sources(catalog.get_dataset(args.name).sources, args.name)
        notes.append(_not_held(args.name, "is no source of", removed, set(now), now))
        sources = (*now, *args.add_source)
        fields["sources"] = [p for p in check_sources(sources, args.name) if p not in removed]
    if not fields:
        raise InvalidInput(
            "nothing to update: give --description, --source, --owner, --grant, --revoke, "
            "--add-source or --remove-source"
        )
    ctx.emit(_public(ctx, catalog.update_dataset(args.name, **fields)))
    for note in filter(None, notes):  # after the update: stdout stays the dataset, as before
        print(note, file=ctx.err)
    return 0
