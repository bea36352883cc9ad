"""``datahub labelx ...``: run the labeling service and administer it from a shell.

serve · create-user · create-token · list-tokens · revoke-token · projects · create-project · preannotate · commit · export
"""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
import shutil
import signal
import sys
import threading
import warnings

from datahub.errors import AccessDenied, AlreadyExists, InvalidInput, NotFound
from datahub.words import counted

# what gives LabelX's callers an identity once authentication is on (check_bind's advice)
ACCOUNTS = (
    "make its accounts with `datahub labelx create-user NAME --role annotator` (or reviewer, admin; "
    "each holds only the roles its name has on the datasets: `datahub dataset update DATASET --grant NAME=writer`)"
)


# --user of create-project and commit: not argparse's required, whose refusal ("the following
# arguments are required: --user") could not say what it is for nor which admins there are
ADMIN_HELP = "the LabelX admin doing this, recorded as its author (required)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("labelx", help="labeling service: users, projects, pre-annotation, export")
    sub = p.add_subparsers(dest="labelx_command", metavar="ACTION", required=True)

    s = sub.add_parser("serve", help="run the LabelX web UI and API")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    s.add_argument("--port", type=int, default=8090, help="port to listen on (default %(default)s)")
    s.add_argument("--secure-cookies", action="store_true", help="mark cookies Secure (behind a TLS proxy)")
    s.add_argument(
        "--auth",
        dest="local_mode",
        action="store_false",
        default=None,
        help="accounts hold only their datasets' roles (api.local_mode = false); needed off loopback",
    )
    s.set_defaults(func=_serve, creates_catalog=True)

    s = sub.add_parser("create-user", help="add a user (password from $LABELX_PASSWORD or a prompt)")
    s.add_argument("name", help="the new user's name")
    s.add_argument(
        "--role",
        choices=("annotator", "reviewer", "admin"),
        default="annotator",
        help="what the user may do (default %(default)s)",
    )
    s.set_defaults(func=_create_user, creates_catalog=True)  # the first step on a new home

    s = sub.add_parser(
        "set-password",
        help="give a user a new password (from $LABELX_PASSWORD or a prompt); ends their sessions and API tokens",
    )
    s.add_argument("name", help="the user's name")
    s.set_defaults(func=_set_password)

    s = sub.add_parser(
        "disable-user",
        help="take a user's account away: no password opens it, its sessions and API tokens end",
    )
    s.add_argument("name", help="the user's name")
    s.set_defaults(func=_disable_user)

    s = sub.add_parser("create-token", help="create an API token for a user (printed once)")
    s.add_argument("name", help="the user the token acts as")
    s.add_argument("--description", default="", help="what the token is for (shown by list-tokens)")
    s.set_defaults(func=_create_token, creates_catalog=True)

    # as the catalog's token list and token revoke: LabelX had create-token only (newuser27)
    s = sub.add_parser(
        "list-tokens",
        help="every API token: user, id, description, created (never a secret)",
        description="The id is what 'revoke-token' takes. Secrets are stored only as their "
        "SHA-256 (the id), so no command can show one again.",
    )
    s.add_argument("--user", default=None, help="only this user's tokens")
    s.set_defaults(func=_list_tokens)

    s = sub.add_parser(
        "revoke-token",
        help="revoke an API token by its id (see 'list-tokens') or by its secret read from stdin ('-')",
        description="Give the id 'list-tokens' shows, or '-' to read the secret (lx_…) from stdin: "
        "a secret given as an argument is readable by every local user while the command runs "
        "(ps, /proc/PID/cmdline) and stays in the shell's history.",
    )
    s.add_argument("token", metavar="ID|-", help="the token's id, or - to read its secret or id from stdin")
    s.set_defaults(func=_revoke_token)

    s = sub.add_parser("projects", help="list projects with their progress")
    s.set_defaults(func=_projects)

    # "from dataset@version" read as the form --dataset takes, which refuses it (newuser25)
    s = sub.add_parser(
        "create-project", help="create a project from a version of a dataset (--dataset, --version)"
    )
    s.add_argument("name", help="the project's name")
    s.add_argument("--dataset", required=True, help="the dataset's name (its version goes in --version)")
    s.add_argument("--version", default=None, help="version number, tag or latest (default)")
    s.add_argument("--prefix", default="", help="only the records under this key prefix, e.g. val/")
    s.add_argument("--filter", default="", help="record filter, e.g. 'meta.split=train'")
    s.add_argument(
        "--kind",
        choices=("classification", "detection"),
        default="classification",
        help="a class per image, or boxes (default: %(default)s)",
    )
    s.add_argument("--multi", action="store_true", help="multi-label classification")
    s.add_argument("--classes", required=True, help="comma-separated class names (keys 1, 2, 3 …)")
    s.add_argument("--field", default=None, help="record label field (default: class / boxes)")
    s.add_argument(
        "--task-size",
        type=int,
        default=50,
        help="items per task (default 50); fewer tasks than annotators leave some without one",
    )
    s.add_argument("--annotators", default="", help="comma-separated user names (the project's members)")
    s.add_argument(
        "--claim", action="store_true", help="leave tasks unassigned: annotators take them one at a time"
    )
    s.add_argument("--user", default=None, help=ADMIN_HELP)
    s.set_defaults(func=_create_project)

    s = sub.add_parser("preannotate", help="attach model predictions to a project as suggestions")
    s.add_argument("project", help="the project's name")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--predictions", help="JSON-lines file: {key, value, score, model} per line")
    src.add_argument("--model", help="TorchScript file or python callable module:function")
    s.add_argument("--model-version", default="", help="name shown with each suggestion")
    s.add_argument("--batch-size", type=int, default=16, help="images per model call (default %(default)s)")
    s.add_argument("--side", type=int, default=224, help="square input size fed to the model")
    s.set_defaults(func=_preannotate)

    s = sub.add_parser("commit", help="commit accepted labels as a new dataset version")
    s.add_argument("project", help="the project's name")
    s.add_argument("--user", default=None, help=ADMIN_HELP)
    s.add_argument("--to-dataset", default=None, help="a new dataset instead of a new version")
    # -m as datahub import/commit take it: it was "unrecognized arguments" (newuser27)
    s.add_argument("-m", "--message", default="", help="the new version's message")
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="commit over labels changed at the head since the project's version",
    )
    s.set_defaults(func=_commit)

    s = sub.add_parser("export", help="download labels as COCO JSON, YOLO zip or CSV")
    s.add_argument("project", help="the project's name")
    s.add_argument("--format", choices=("coco", "yolo", "csv"), required=True, help="the file's format")
    s.add_argument(
        "--include",
        choices=("accepted", "annotated"),
        default="accepted",
        help="accepted labels only (default), or annotated, in review and accepted ones",
    )
    s.add_argument(
        "--raw",
        action="store_true",
        help="CSV: the exact keys and labels (by default a cell a spreadsheet would run as a formula gets a ' in front)",
    )
    s.add_argument("-o", "--output", required=True, help="file to write (atomically), or - for stdout")
    s.set_defaults(func=_export)


def _service(ctx):
    from labelx.deps import labelx_db_path
    from labelx.service import LabelService
    from labelx.store import LabelStore

    catalog = ctx.catalog  # first: with no catalog, exit 3 before labelx.db is made under a mistyped home
    store = ctx.service("labelx_store", lambda: LabelStore(labelx_db_path(ctx.config)))
    return LabelService(store, catalog)


def _images(ctx):
    from datahub.cache import open_cache
    from datahub.web.images import ImageSource

    cache = ctx.service("cache", lambda: open_cache(ctx.config, ctx.stores))
    return ImageSource(ctx.config.home_path / "labelx" / "previews", cache=cache)


def _admin(service, name: str | None, command: str, example: str = ""):
    """The admin ``--user`` names. A name with no account is answered with the admins there
    are (or the command making one, with the admin role): the store's answer said to create it
    as an annotator, who may not do this either (newuser31). No ``--user`` at all is answered
    the same way, naming ``command`` (``labelx commit``) and, run with the first admin,
    ``example`` (``labelx commit P``): argparse said only "the following arguments are
    required: --user", not what it is for nor who may be named (newuser74)."""
    admins = [u.name for u in service.store.list_users() if u.is_admin]

    def which(new: str) -> str:
        return f"one of {', '.join(admins)}" if admins else f"an admin (`{new}`)"

    if name is None:
        first = shlex.quote(admins[0]) if admins else "NAME"
        shown = f" (`datahub {example} --user {first}`)" if example and admins else ""
        raise InvalidInput(
            f"{command} needs --user NAME, the LabelX admin doing this (recorded as its author): "
            f"{which('datahub labelx create-user NAME --role admin')}; add --user {first}{shown}"
        )
    try:
        user = service.store.user_by_name(name)
    except NotFound:
        make = f"datahub labelx create-user {shlex.quote(name)} --role admin"
        raise NotFound(
            f"no LabelX user {name!r}: --user names the admin doing this: {which(make)}", user=name
        ) from None
    if not user.is_admin:
        needs = which("datahub labelx create-user NAME --role admin")
        raise AccessDenied(f"user {name!r} is {user.role}, not admin: this needs --user {needs}")
    return user


def _serve(args, ctx) -> int:
    """Serve until SIGINT or SIGTERM, then close the cache through ``ctx``.

    Not ``uvicorn.run``: after a graceful stop it re-raises the signal it caught, so the
    process died before ``ctx.close()`` and the next start had to rebuild the disk cache's
    index. The same server and signal wait as ``datahub serve`` instead.

    Local mode only on loopback, as ``datahub serve``: there a LabelX admin acts as the
    datahub's local admin (every dataset, whatever its access list), which is the person at
    this machine only while no other machine reaches the server.
    """
    from datahub.api.server import ApiServer, bind_socket, check_bind, stop_signals
    from datahub.cache import open_cache
    from labelx.app import create_labelx_app

    api = ctx.config.api
    api.host, api.port = args.host, args.port
    if args.local_mode is not None:
        api.local_mode = args.local_mode
    check_bind(ctx.config, ACCOUNTS)  # before anything listens
    sock = bind_socket(args.host, args.port)  # a busy port is one clear error, before slow setup
    try:
        cache = ctx.service("cache", lambda: open_cache(ctx.config, ctx.stores))
        app = create_labelx_app(
            ctx.config,
            catalog=ctx.catalog,
            stores=ctx.stores,
            cache=cache,
            secure_cookies=args.secure_cookies,
        )
        server = ApiServer(app, ctx.config, sock=sock)
    except BaseException:
        sock.close()
        raise
    # SIGHUP too: closing the terminal killed it with its cache never closed
    with stop_signals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) as wait:
        try:
            server.start()
            print(f"LabelX on {server.url}/ (Ctrl-C stops)", file=ctx.err)
            ctx.err.flush()
            wait()
        finally:
            server.stop()
    print("stopped", file=ctx.err)
    return 0


def _create_user(args, ctx) -> int:
    from datahub.validation import check_name
    from labelx.auth import hash_password

    name = check_name(args.name, "user")  # before the prompt: a refused name wastes no typed password
    store = _service(ctx).store
    try:  # so is a name taken: it asked for the password, then said "already exists" (newuser74)
        taken = store.user_by_name(name)
    except NotFound:
        taken = None
    if taken is not None:
        raise AlreadyExists(
            f"user {name!r} already exists ({taken.role}); pick another name, or give it a new password "
            f"with `datahub labelx set-password {shlex.quote(name)}`",
            user=name,
        )
    password = _password(f"password for {name}: ")
    user = store.create_user(name, args.role, hash_password(password))
    ctx.emit({"name": user.name, "role": user.role})
    return 0


def _set_password(args, ctx) -> int:
    """The account is looked up before the password is asked for: ``set-password bob`` of no
    account ``bob`` asked for a new password, then said "no user 'bob'" (newuser74)."""
    from labelx.auth import hash_password

    _service(ctx).store.user_by_name(args.name)  # NotFound names the create-user command
    return _replace_password(args.name, hash_password(_password(f"new password for {args.name}: ")), ctx)


def _password(prompt: str) -> str:
    """From ``$LABELX_PASSWORD`` (scripts, tests) or asked for, never an argument (``ps`` shows those).

    With no terminal, getpass reads stdin; nothing there (cron, CI, ``ssh host cmd``) is the
    user's mistake, not an EOFError reported as a datahub bug."""
    if os.environ.get("LABELX_PASSWORD"):
        return os.environ["LABELX_PASSWORD"]
    try:
        with warnings.catch_warnings():  # getpass's own line says input may be echoed; not its traceback path
            warnings.simplefilter("ignore", getpass.GetPassWarning)
            return getpass.getpass(prompt)
    except EOFError:
        print(file=sys.stderr)  # end the prompt's line
        raise InvalidInput(
            "no password given: set $LABELX_PASSWORD, or run the command at a terminal to be asked for one"
        ) from None


def _disable_user(args, ctx) -> int:
    """Where the server runs (its operator), as ``create-user``: a set-password gives it back."""
    from labelx.accounts import DISABLED

    return _replace_password(args.name, DISABLED, ctx)


def _replace_password(name: str, pw_hash: str, ctx) -> int:
    from labelx.deps import demo_password_path

    sessions, tokens = _service(ctx).store.set_password(name, pw_hash)
    # make run's file of admin's first password no longer opens the account: the login page
    # named it as long as it existed, and sent people to a password that failed
    demo = demo_password_path(ctx.config)
    stale = name == "admin" and demo.exists()
    if stale:
        demo.unlink()
    ctx.emit(
        {
            "user": name,
            "sessions_ended": sessions,
            "tokens_revoked": tokens,
            "removed": str(demo) if stale else None,
        },
        text=f"{name}: {counted(sessions, 'session')} ended, {counted(tokens, 'API token')} revoked"
        + (f"; removed {demo}, which held the old password" if stale else ""),
    )
    return 0


def _create_token(args, ctx) -> int:
    from labelx.auth import Auth, sha256

    service = _service(ctx)
    token = Auth(service.store).new_token(service.store.user_by_name(args.name), args.description)
    # text: the secret alone (TOKEN=$(…)); --json adds the id list-tokens and revoke-token show
    ctx.emit({"user": args.name, "token": token, "id": sha256(token)}, text=token)
    return 0


TOKEN_COLUMNS = ("user", "id", "description", "created", "made_by")


def _list_tokens(args, ctx) -> int:
    """Every live API token with what identifies it; never a secret (the store has none)."""
    service = _service(ctx)
    user = None if args.user is None else service.store.user_by_name(args.user).id
    ctx.emit(service.store.list_tokens(user), columns=TOKEN_COLUMNS)
    return 0


def _revoke_token(args, ctx) -> int:
    """Delete a token by id or secret, as ``POST /api/tokens/revoke`` does (``delete_token``)."""
    from datahub.console.token_arg import token_argument
    from labelx.auth import sha256

    given = token_argument(
        args.token,
        prefix="lx_",
        command="datahub labelx revoke-token",
        list_command="datahub labelx list-tokens",
        program=ctx.command,
        err=ctx.err,
    )
    token_hash = sha256(given) if given.startswith("lx_") else given
    service = _service(ctx)
    owner = service.store.token_user(token_hash)
    if owner is None:
        raise NotFound(
            f"no such LabelX API token {token_hash[:12]}…: it was never issued or is already revoked "
            "(`datahub labelx list-tokens` lists the live ones); nothing was revoked"
        )
    service.store.delete_token(token_hash)
    ctx.emit(
        {"revoked": token_hash, "user": owner.name},
        text=f"revoked LabelX API token {token_hash} of {owner.name}",
    )
    return 0


def _projects(args, ctx) -> int:
    service = _service(ctx)
    rows = []
    # every state an item can be in, as the dashboard counts them: with only TODO and ACCEPTED,
    # a project whose items all waited for review read "30 items, 0 to do, 0 accepted" (newuser32)
    states = {"todo": "todo", "annotated": "annotated", "skipped": "skipped", "in_review": "submitted",
              "rejected": "rejected", "accepted": "accepted"}  # fmt: skip
    for p in service.store.list_projects():
        counts = service.store.status_counts(p.id)
        rows.append({
            "id": p.id, "name": p.name, "source": f"{p.dataset}@v{p.version}", "kind": p.schema["kind"],
            "items": p.item_count, **{column: counts.get(status, 0) for column, status in states.items()},
        })  # fmt: skip
    ctx.emit(rows, columns=["id", "name", "source", "kind", "items", *states])
    return 0


def _create_project(args, ctx) -> int:
    if "@" in args.dataset:  # it said only "invalid dataset name 'pets@v2'" (newuser17)
        name, _, ref = args.dataset.partition("@")
        raise InvalidInput(
            f"--dataset takes a dataset's name, not a version ({args.dataset!r}); "
            f"the version goes in --version: `--dataset {name} --version {ref or 'latest'}`"
        )
    classes = [c for c in args.classes.split(",") if c.strip()]
    if not classes:  # it said "a label schema needs 1 to 64 classes", of a flag given (newuser36)
        raise InvalidInput(
            f"--classes {args.classes!r} names no class: give the class names, comma-separated "
            "(--classes cat,dog)"
        )
    service = _service(ctx)
    schema = {"kind": args.kind, "multi": args.multi, "classes": classes}
    if args.field:
        schema["field"] = args.field
    project = service.create_project(
        _admin(service, args.user, "labelx create-project"),
        name=args.name,
        dataset=args.dataset,
        ref=args.version,
        prefix=args.prefix,
        where=args.filter,
        schema=schema,
        task_size=args.task_size,
        annotators=[a.strip() for a in args.annotators.split(",") if a.strip()],
        round_robin=not args.claim,
    )
    ctx.emit({"id": project.id, "name": project.name, "items": project.item_count})
    members = [a.strip() for a in args.annotators.split(",") if a.strip()]
    idle = _idle_annotators(service, project, members, claim=args.claim)
    if idle:
        print(f"note: {idle}", file=ctx.err)
    return 0


def _idle_annotators(service, project, members: list[str], *, claim: bool) -> str:
    """Which annotators of the project can get no task, and what gives each one (or ""): 30
    items in tasks of 50 made one task, and the second annotator named had nothing to do,
    unsaid (newuser25; LabelX's "New project" form says the same). Round-robin names them;
    taken one at a time (``--claim``), someone finds none left."""
    if len(members) < 2:
        return ""
    tasks = service.store.list_tasks(project.id)
    if len(tasks) >= len(members):
        return ""
    size = project.item_count // len(members)
    fix = (
        f"a --task-size of {size} or less gives each one a task"
        if size
        else "there are fewer items than annotators"
    )
    split = (
        f"{counted(len(tasks), 'task')} of up to {counted(project.task_size, 'item')} for "
        f"{counted(len(members), 'annotator')}"
    )
    if claim:
        return (
            f"{project.name}: {split}: {len(members) - len(tasks)} of them will find no task to take; {fix}"
        )
    busy = {t["assignee"] for t in tasks}
    idle = [m for m in members if m not in busy]
    return (
        f"{', '.join(idle)} {'has' if len(idle) == 1 else 'have'} no task in {project.name}: {split}; {fix}"
    )


def _preannotate(args, ctx) -> int:
    from labelx import preannotate

    service = _service(ctx)
    project = service.store.project_by_name(args.project)
    schema = service.schema(project)
    if args.predictions:
        try:
            with open(args.predictions, "rb") as fh:
                n, unmatched = preannotate.import_jsonl(
                    service.store, project, schema, preannotate.text_lines(fh)
                )
        except FileNotFoundError as exc:
            raise InvalidInput(f"predictions file {args.predictions} not found") from exc
        except OSError as exc:  # a directory, a file it may not read: "a datahub bug" before (newuser22)
            raise InvalidInput(
                f"cannot read predictions file {args.predictions}: {exc.strerror or exc}; "
                "give a JSON-lines file (one {key, value, score, model} object per line)"
            ) from exc
        if unmatched:  # predictions over a whole dataset for a project of part of it: said, not refused
            print(
                f"note: {counted(len(unmatched), 'key')} of the predictions name no item of project {project.name} "
                f"(first: {unmatched[0]!r}); they were left out",
                file=ctx.err,
            )
        ctx.emit({"project": project.name, "suggestions": n})
        return 0
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        with ctx.progress(project.item_count, f"pre-annotating {project.name}") as progress:
            n = preannotate.run_model(
                service.store, project, schema, _images(ctx), args.model,
                model_version=args.model_version, batch_size=args.batch_size, side=args.side,
                progress=progress, cancel=cancel,
            )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    ctx.emit({"project": project.name, "suggestions": n})
    return 0


def _commit(args, ctx) -> int:
    from labelx.export import commit_labels

    service = _service(ctx)
    project = service.store.project_by_name(args.project)
    admin = _admin(
        service, args.user, "labelx commit", f"labelx commit {shlex.quote(project.name)}"
    )  # before the progress line: it said "stopped by an error" first
    # into a new dataset every record of the project is copied, and counted: against the changed
    # labels the line read "12/1 (1200%) … eta -0s" (newuser27)
    copies = args.to_dataset and args.to_dataset != project.dataset
    total = project.item_count if copies else service.store.count_changed(project.id)
    with ctx.progress(total, f"committing {project.name}") as progress:
        version = commit_labels(
            service, admin, project.id, to_dataset=args.to_dataset,
            message=args.message, progress=progress, overwrite=args.overwrite,
        )  # fmt: skip
    ctx.emit({"dataset": version.dataset, "version": version.seq, "modified": version.modified,
              "added": version.added})  # fmt: skip
    return 0


def _export(args, ctx) -> int:
    from datahub.console.output import output_file, written
    from labelx import export

    # "-" is stdout, as for curl -o - and datahub export -o -: it made a file named "-" (newuser22)
    to_stdout = args.output == "-"
    if to_stdout and args.format == "yolo" and sys.stdout.isatty():
        raise InvalidInput(
            "a YOLO export is a zip file, not for a terminal: redirect it (> labels.zip) or use -o FILE"
        )
    target = None if to_stdout else output_file(args.output)  # a wrong path is said before the export
    service = _service(ctx)
    project = service.store.project_by_name(args.project)
    if args.format == "csv":
        spool = export.export_csv(service, project, args.include, raw=args.raw)
    elif args.format == "yolo":
        spool = export.export_yolo(service, project, args.include)
    else:
        spool = export.export_coco(service, project, _images(ctx), args.include)
    with spool:
        if target is None:
            sys.stdout.flush()
            shutil.copyfileobj(spool, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            with written(target, "wb") as out:  # nothing half-written under the final name
                shutil.copyfileobj(spool, out)
    note = export.exported_note(service, project, args.include)
    print(f"wrote {'stdout' if to_stdout else args.output}: {note}", file=sys.stderr)
    return 0
