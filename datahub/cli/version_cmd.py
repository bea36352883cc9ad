"""Version commands: ``log``, ``ls``, ``diff``, ``tag``, ``export``, ``derive``.

``DATASET@REF`` names a version: REF is a number (``3`` or ``v3``), a tag or ``latest``
(the default when ``@REF`` is left out).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from itertools import islice

from datahub.console.context import CliContext, as_typed, author_or_default, shown
from datahub.console.output import output_file, written
from datahub.errors import Conflict, InvalidInput, InvalidName, VersionNotFound
from datahub.validation import check_tag, is_ref, meant_ref, split_version
from datahub.words import counted

LOG_COLUMNS = (
    "seq",
    "created_at",
    "author",
    "record_count",
    "added",
    "removed",
    "modified",
    "tags",
    "message",
)


def split_ref(spec: str) -> tuple[str, str]:
    """``"imagenet@v3"`` -> ("imagenet", "v3"); ``"imagenet"`` -> ("imagenet", "latest");
    ``"imagenet@"`` is refused (``validation.split_version``)."""
    name, ref = split_version(spec)
    return name, ref or "latest"


def dataset_only(spec: str, command: str, instead: Callable[[str, str], str]) -> str:
    """``spec`` where a command takes a dataset, not a version: ``datahub log pets@v2`` said
    only "invalid dataset name 'pets@v2'" (newuser17), as if the name were wrong.
    ``instead(name, ref)`` says what to run, from the two parts of ``spec``."""
    if "@" not in spec:
        return spec
    name, _, ref = spec.partition("@")
    # the version meant, never what names none: `log pets@@v1` said to run `ls pets@@v1` (newuser72)
    ref = ref if is_ref(ref) else meant_ref(ref) or "latest"
    raise InvalidInput(f"`datahub {command}` takes a dataset, not a version ({spec!r}): {instead(name, ref)}")


def version_arguments(dataset: str, given: dict[str, str], command: Callable[..., str]) -> None:
    """Refuse a version argument that names none (``diff pets @v1 2``, ``tag pets golden
    pets@v1``), naming the argument as typed and the command with the versions meant
    (``command(**fixed)``). Why: they said "invalid tag '@v1'", and in ``tag`` the tag was
    another argument (newuser72)."""
    bad = {what: ref for what, ref in given.items() if not is_ref(ref)}
    if not bad:
        return
    fixed = {what: ref if is_ref(ref) else meant_ref(ref) for what, ref in given.items()}
    named = ", ".join(f"{what} {ref!r}" for what, ref in bad.items())
    hint = f"; did you mean `{command(**fixed)}`?" if all(fixed.values()) else ""
    raise InvalidName(
        f"{named} names no version of {dataset}: a version is a number (1 or v1), a tag or latest{hint}",
        dataset=dataset,
    )


def register(sub: argparse._SubParsersAction) -> None:
    # every argument says what it is and its default in --help (newuser17: `diff --help` showed a
    # bare TO, `tag --help` a bare ref, `log --help` a bare --limit)
    ref = "a version: a number (3 or v3), a tag, or latest"
    p = sub.add_parser("log", help="a dataset's versions, newest first")
    p.add_argument("dataset", metavar="DATASET", help="a dataset's name (not DATASET@REF)")
    p.add_argument("--limit", type=int, default=None, help="show only the newest N versions")
    p.set_defaults(func=log)

    p = sub.add_parser("ls", help="the records of a version, in key order")
    p.add_argument("version", metavar="DATASET[@REF]", help=f"REF is {ref} (the default)")
    p.add_argument("--prefix", default="", help="only keys under this prefix (train/)")
    p.add_argument("--filter", default=None, help="e.g. labels.class=cat,meta.split!=test")
    p.add_argument("--limit", type=int, default=None, help="list only the first N records")
    p.set_defaults(func=ls)

    p = sub.add_parser("diff", help="what changed between two versions (added/removed/modified)")
    p.add_argument("dataset", metavar="DATASET", help="a dataset's name (not DATASET@REF)")
    p.add_argument("a", metavar="FROM", help="older version (0 = empty)")
    p.add_argument("b", metavar="TO", nargs="?", default="latest", help="newer version (default: latest)")
    p.add_argument("--prefix", default="", help="only keys under this prefix (train/)")
    p.set_defaults(func=diff)

    p = sub.add_parser("tag", help="name a version (tag DATASET TAG REF) or remove a tag (--delete)")
    p.add_argument("dataset", metavar="DATASET", help="a dataset's name (not DATASET@REF)")
    p.add_argument("tag", metavar="TAG", help="the name, starting with a letter (golden, not v3)")
    p.add_argument("ref", metavar="REF", nargs="?", default="latest", help=f"{ref} (the default)")
    p.add_argument("--delete", action="store_true", help="remove the tag")
    p.add_argument(
        "--force", action="store_true", help="move a tag that already names another version (as git tag -f)"
    )
    p.set_defaults(func=tag)

    p = sub.add_parser("export", help="a whole version as NDJSON (one record per line)")
    p.add_argument("version", metavar="DATASET[@REF]", help=f"REF is {ref} (the default)")
    p.add_argument("-o", "--output", help="file to write (atomically); default, or -, stdout")
    p.add_argument("--prefix", default="", help="only keys under this prefix (train/)")
    p.add_argument("--filter", default=None, help="e.g. labels.class=cat,meta.split!=test")
    p.set_defaults(func=export)

    p = sub.add_parser("derive", help="commit the records matching a filter as a new version")
    p.add_argument(
        "version", metavar="DATASET[@REF]", help=f"the version to filter; REF is {ref} (the default)"
    )
    p.add_argument(  # the name ls, export, prefetch and cache take; --where its older one
        "--filter", "--where", dest="where", metavar="FILTER", required=True,
        help="record filter as ls and export take it, e.g. labels.class=cat (--where: the same)",
    )  # fmt: skip
    p.add_argument("--to", dest="to_dataset", default=None, help="target dataset (default: the same)")
    p.add_argument("-m", "--message", default="", help="the new version's message")
    p.set_defaults(func=derive)


def log(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.catalog.public import version_row

    name = dataset_only(
        args.dataset,
        "log",
        lambda name, ref: (
            f"`datahub log {name}` lists its versions, `datahub ls {name}@{ref}` the records of one"
        ),
    )
    if args.limit is not None and args.limit < 0:  # islice's ValueError was "a datahub bug"
        raise InvalidInput(f"invalid limit {args.limit}: use a number >= 0", limit=args.limit)
    versions = [version_row(v) for v in islice(ctx.catalog.log(name), args.limit)]
    if not versions and not ctx.json_output and args.limit != 0:
        # a dataset just created printed "(none)", and every other command's "see `datahub
        # log x`" led here: it says how the first version is made, on stderr (newuser42)
        from datahub.catalog.catalog import no_versions_yet

        print(shown(as_typed(no_versions_yet(name, None).message, ctx.command)), file=ctx.err)
        return 0
    ctx.emit(versions, columns=LOG_COLUMNS)
    return 0


def ls(args: argparse.Namespace, ctx: CliContext) -> int:
    name, ref = split_ref(args.version)
    records = ctx.catalog.list_records(name, ref, prefix=args.prefix, where=args.filter, limit=args.limit)
    listed = 0

    def rows():
        nonlocal listed
        for record in records:
            listed += 1
            yield _record_row(record, ctx.json_output)

    ctx.emit_lines(rows(), columns=("key", "size", "etag", "labels"))
    if not listed and not ctx.json_output and (args.prefix or args.filter) and args.limit != 0:
        print(nothing_listed(ctx, name, ref, args.prefix, args.filter), file=ctx.err)
    return 0


def nothing_listed(ctx: CliContext, name: str, ref: str, prefix: str, where: str | None) -> str:
    """Why ``ls`` printed nothing, with what is there, on stderr (stdout stays empty for pipes).

    Why: a typo in a prefix (``trian/``) or a filter's field (``labels.clas=cat``) printed
    nothing at all and exited 0, as a version with no such records does (newuser15). Costs one
    directory level and one record read, only when nothing was listed. ``prefetch`` and ``cache
    pin`` say the same of a prefix that holds nothing (newuser71)."""
    what = f"no record of {name}@{ref}" + (f" under prefix {shown(prefix)!r}" if prefix else "")
    what += f" matches {shown(where)!r}" if where else ""
    here = next(iter(ctx.catalog.list_records(name, ref, prefix=prefix, limit=1)), None)
    if here is None:  # the prefix holds nothing: the folders and files beside it
        parent = prefix[: prefix.rstrip("/").rfind("/") + 1]
        # a subdirectory comes as its string, a file as a DirFile row whose first field is its key
        beside = [
            e if isinstance(e, str) else e[0]
            for e in ctx.catalog.list_directory(name, ref, prefix=parent, limit=6)
        ]
        names = ", ".join(shown(e[len(parent) :]) for e in beside[:5]) + (", …" if len(beside) > 5 else "")
        return f"{what}; {f'{shown(parent)!r}' if parent else 'the top level'} holds: {names or 'nothing'}"
    fields = [f"labels.{k}" for k in sorted(here.labels)] + [f"meta.{k}" for k in sorted(here.meta)]
    has = f"the fields {', '.join(fields)}" if fields else "no labels or meta"
    return f"{what}; its first record ({shown(here.key)}) has {has}"


def _record_row(record, full: bool) -> dict:
    from datahub.catalog.public import record_row

    row = record_row(record)
    if not full:
        row["labels"] = json.dumps(row["labels"], sort_keys=True) if row["labels"] else "-"
    return row


def diff(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.catalog.public import diff_row

    # ``diff pets@v1 pets@v2``: the versions are the two arguments after the dataset's name
    to = args.a.rpartition("@")[2]
    name = dataset_only(
        args.dataset,
        "diff",
        lambda name, ref: f"`datahub diff {name} {ref} {to}` compares two of its versions",
    )
    version_arguments(
        name, {"FROM": args.a, "TO": args.b}, lambda FROM, TO: f"datahub diff {name} {FROM} {TO}"
    )
    entries = ctx.catalog.diff(name, args.a, args.b, prefix=args.prefix)
    if ctx.json_output:
        ctx.emit_lines((diff_row(e) for e in entries), columns=())
        return 0
    sign = {"added": "+", "removed": "-", "modified": "~"}
    counts = {"added": 0, "removed": 0, "modified": 0}
    for e in entries:
        counts[e.kind] += 1
        ctx.out.write(f"{sign[e.kind]} {shown(e.key)}\n")
    print(", ".join(f"{n} {k}" for k, n in counts.items()), file=ctx.err)
    return 0


def tag(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.catalog.public import version_row

    dataset_only(
        args.dataset,
        "tag",
        lambda name, ref: f"`datahub tag {name} {args.tag} {ref}` names its version {ref}",
    )
    if args.delete:
        ctx.catalog.untag(args.dataset, args.tag)
        ctx.emit(
            {"dataset": args.dataset, "untagged": args.tag}, text=f"removed tag {args.tag} of {args.dataset}"
        )
        return 0
    catalog = ctx.catalog
    check_tag(args.tag)
    version_arguments(
        args.dataset, {"REF": args.ref}, lambda REF: f"datahub tag {args.dataset} {args.tag} {REF}"
    )
    target = catalog.resolve(args.dataset, args.ref)
    try:
        before: int | None = catalog.resolve(args.dataset, args.tag).seq
    except VersionNotFound:
        before = None
    if before is not None and before != target.seq and not args.force:
        # a tag names what someone trained or evaluated on: moving it is said, never silent; the
        # command in backticks, so it is shown as this user runs datahub (as_typed; newuser71)
        raise Conflict(
            f"tag {args.tag} of {args.dataset} already names v{before}; to move it to v{target.seq}: "
            f"`datahub tag {args.dataset} {args.tag} {args.ref} --force`",
            dataset=args.dataset,
            tag=args.tag,
        )
    version = catalog.tag(args.dataset, args.tag, target.seq)
    moved = f" (moved from v{before})" if before is not None and before != version.seq else ""
    ctx.emit(
        {**version_row(version), "previous": before},
        text=f"{args.dataset}@{args.tag} -> v{version.seq}{moved}",
    )
    return 0


def export(args: argparse.Namespace, ctx: CliContext) -> int:
    name, ref = split_ref(args.version)
    # "-" is stdout, as for curl -o -: it made a file named "-" (newuser22)
    target = output_file(args.output) if args.output not in (None, "", "-") else None
    catalog = ctx.catalog
    version = catalog.resolve(name, ref)
    records = catalog.list_records(name, version.seq, prefix=args.prefix, where=args.filter)
    # a prefix or a filter exports part of the version: its record count is no total (as prefetch)
    total = None if args.prefix or args.filter else version.record_count
    with ctx.progress(total, f"export {name}@v{version.seq}") as progress:
        if target is None:
            _write_ndjson(records, ctx.out, progress)
            return 0
        with written(target, "w", encoding="utf-8") as fh:  # nothing half-written on failure
            _write_ndjson(records, fh, progress)
    return 0


def _write_ndjson(records, out, progress) -> None:
    from datahub.catalog.public import record_row

    for record in records:
        out.write(json.dumps(record_row(record), separators=(",", ":")) + "\n")
        progress.update(1, record.size)


def derive(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.catalog.public import version_row

    name, ref = split_ref(args.version)
    version = ctx.catalog.derive(
        name,
        ref,
        args.where,
        to_dataset=args.to_dataset,
        message=args.message,
        author=author_or_default(None),
    )
    ctx.emit(
        version_row(version),
        text=f"committed {version.dataset}@v{version.seq}: {counted(version.record_count, 'record')} "
        f"({version.added} added, {version.removed} removed, {version.modified} modified)",
    )
    return 0
