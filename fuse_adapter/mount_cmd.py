"""``datahub mount`` and ``datahub umount``: FUSE views of dataset versions, buckets and workspaces.

    datahub mount MOUNTPOINT DATASET[@REF] ...        read-only: MOUNTPOINT/<dataset>/v<N>/...
                                                      (warms the cache in the background; --no-prefetch: not)
                                                      (a bucket: warms what fits and readers go through)
                                                      (a stale mount point of a dead daemon is cleaned first)
    datahub mount MOUNTPOINT s3://bucket[/prefix]     read-only snapshot of a bucket (a new one each mount)
    datahub mount --workspace NAME MOUNTPOINT [--commit-to DATASET [--author NAME]]   writable, write-back
    datahub umount MOUNTPOINT                         flush (rw), unmount; cleans stale mounts

The handlers only parse the command line and hand a plain description of the mount to
``fuse_adapter.mount_assembly``, which builds and serves it (see docs/fuse.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from datahub.console.context import CliContext
from datahub.console.numbers import at_least, linux_id
from datahub.errors import InvalidInput, NotFound
from datahub.validation import check_text

if TYPE_CHECKING:
    from fuse_adapter.mount_assembly import ReadOnlyMount

log = logging.getLogger("fuse_adapter")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mount",
        help="mount dataset versions, a bucket snapshot or a writable workspace (FUSE)",
        description="Mount dataset versions (DATASET[@REF] ...), a bucket snapshot (s3://bucket/prefix) "
        "read-only, or a writable workspace (--workspace NAME). Runs in the foreground until "
        "unmounted or signalled (SIGTERM/SIGINT unmount cleanly); --background returns once mounted.",
    )
    p.add_argument("mountpoint", help="an existing empty directory")
    p.add_argument(
        "sources", nargs="*", metavar="SOURCE", help="DATASET[@REF] ... or one s3://bucket[/prefix]"
    )
    p.add_argument("--workspace", metavar="NAME", help="mount this writable workspace instead")
    p.add_argument(
        "--commit-to", metavar="DATASET", help="workspace: commit its files as a new version on unmount"
    )
    p.add_argument(
        "--author",
        metavar="NAME",
        help="workspace with --commit-to: the author of the version committed at unmount "
        "(default: the current user; the CSI plugin gives the pod's service account)",
    )
    p.add_argument(
        "--quota",
        type=int,
        metavar="BYTES",
        help="workspace: the most bytes its files may hold (df shows it; writes past it fail with ENOSPC)",
    )
    p.add_argument(
        "--refresh",
        action="store_true",
        help="bucket: accepted and changes nothing (every bucket mount lists the bucket and takes a new snapshot)",
    )
    p.add_argument(
        "--no-snapshot",
        action="store_true",
        help="bucket: serve the listing without committing it as a version of the bucket's snapshot "
        "dataset (the CSI plugin's, for a bucket listed from an endpoint a volume's Secret names: "
        "not the listing of the bucket the catalog's readers read)",
    )
    p.add_argument("--endpoint", metavar="URL", help="S3 endpoint URL (overrides s3.endpoint_url)")
    p.add_argument("--cache-dir", metavar="DIR", help="local cache directory (overrides cache.disk_dir)")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="read-only: keep nothing on disk (a small RAM cache for read-ahead only)",
    )
    reads = p.add_mutually_exclusive_group()
    reads.add_argument(
        "--passthrough",
        action="store_true",
        help="read-only: let the kernel serve files of the disk tier itself (FUSE passthrough) for "
        "good, never switching to zero-message opens; each open then costs an OPEN and a RELEASE, "
        "a warm epoch half as fast (a baseline of bench/mount/warm_path.py; docs/fuse.md). "
        "--workspace: stage each new or truncated file on local disk and let the kernel write it "
        "(disk-speed writes, durable in the shared tier at close as ever); msync is durable on "
        "local disk only, and writes after an unmount are not refused (docs/writeback.md)",
    )
    reads.add_argument(
        "--no-passthrough",
        action="store_true",
        help="never use FUSE passthrough: read-only, zero-message opens with READs answered in C "
        "from the start (each SSD-tier hit a READ through the daemon; docs/fuse.md); for workspace "
        "writes the default (each WRITE through the daemon)",
    )
    reads.add_argument(
        "--auto-read-mode",
        action="store_true",
        help="read-only, the default: start with FUSE passthrough (SSD-tier hits served by the "
        "kernel, no READ) and switch once to zero-message opens when nearly every open finds its "
        'page file in the page cache (a warm epoch then sends no request; docs/fuse.md, "The '
        'automatic choice")',
    )
    p.add_argument(
        "--no-fastread",
        action="store_true",
        help="read-only, for measurements: answer every READ in Python, also of files whose page "
        "file pyfuse3's C threads would read (the baseline of bench/mount/warm_path.py; docs/fuse.md)",
    )
    p.add_argument(
        "--no-fastopen",
        action="store_true",
        help="read-only, for measurements: answer every open and release of a passthrough file in "
        "Python instead of in pyfuse3's C table (the baseline of bench/mount/ssd_hit.py; docs/fuse.md)",
    )
    p.add_argument(
        "--no-fastloop",
        action="store_true",
        help="read-only, for measurements: read requests on pyfuse3's trio loop instead of its C "
        "thread, which answers opens and releases of passthrough files and isatty() itself "
        "(the baseline of bench/mount/ssd_hit.py; docs/fuse.md)",
    )
    p.add_argument(
        "--no-io-uring",
        action="store_true",
        help="read-only, for measurements: take requests from /dev/fuse only, even when the kernel "
        "offers FUSE over io_uring (one queue per CPU; docs/fuse.md)",
    )
    p.add_argument(
        "--no-lookup-in-c",
        action="store_true",
        help="read-only, for measurements: answer every LOOKUP in Python, also of names answered "
        "before, which pyfuse3's C threads answer otherwise (docs/fuse.md)",
    )
    p.add_argument(
        "--request-loop",
        choices=("c", "trio"),
        default="c",
        help="--workspace: who runs the requests: pyfuse3's C threads, which call the handlers "
        "themselves (c, the default), or its trio loop (trio: the baseline of "
        'bench/writeback/tree_ab.py; docs/writeback.md, "The request loop in C")',
    )
    p.add_argument(
        "--writes-in-c",
        action="store_true",
        help="--workspace, without --passthrough, --writeback-cache or --quota: stage new files on "
        "local disk and answer their WRITEs in pyfuse3's C reader thread (every WRITE still reaches "
        "the daemon; close and fsync stay durable in the shared tier). Faster for big files, slower "
        'for small ones, so not the default (docs/writeback.md, "WRITEs answered in C")',
    )
    p.add_argument(
        "--writeback-cache",
        action="store_true",
        help="--workspace, without --passthrough: let the kernel keep written pages in its page cache "
        "(FUSE write-back cache) and send them to the daemon in large WRITEs, at the latest when the "
        "file is closed; close and fsync stay durable in the shared tier. A write past the quota then "
        "fails at close, not at write (docs/writeback.md)",
    )
    warm = p.add_mutually_exclusive_group()
    warm.add_argument(
        "--prefetch",
        dest="prefetch",
        action="store_true",
        default=None,
        help="read-only: warm the cache in the background with every mounted file, at low priority "
        "and only what fits (the default for dataset versions; a bucket snapshot without either flag "
        "warms automatically: whole if small enough to fit, else a directory readers go through)",
    )
    warm.add_argument(
        "--no-prefetch", dest="prefetch", action="store_false", help="read-only: no background warm-up"
    )
    p.add_argument("--uid", type=linux_id, help="owner shown for every file (default: the mounting user)")
    p.add_argument("--gid", type=linux_id, help="group shown for every file (default: the mounting user's)")
    p.add_argument("--allow-other", action="store_true", help="let other users access the mount")
    p.add_argument(
        "--threads", type=at_least(1), default=32, help="worker threads for blocking reads (default 32)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", action="store_true", help="stay attached (the default)")
    mode.add_argument("--background", action="store_true", help="detach and return once the mount is ready")
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    p.set_defaults(func=run_mount)

    u = sub.add_parser("umount", help="flush (workspace) and unmount; also cleans up after a crashed mount")
    u.add_argument("mountpoint", help="the directory a datahub mount is mounted on")
    u.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a flush (default 600)")
    u.set_defaults(func=run_umount)


def _configure(args: argparse.Namespace, ctx: CliContext) -> None:
    config = ctx.config
    if args.endpoint:
        config.s3.endpoint_url = args.endpoint
    if args.cache_dir:
        cache_dir = Path(args.cache_dir).resolve()
        config.cache.disk_dir = str(cache_dir / "disk")
        # the shared tier stays what the config says: for a read-only mount none by default
        # (a local-directory copy beside the disk tier would write every page twice)
    if args.workspace:
        config.cache.profile = "write-back"


def run_mount(args: argparse.Namespace, ctx: CliContext) -> int:
    from fuse_adapter import daemon

    if args.workspace and args.sources:
        raise InvalidInput("give either --workspace NAME or sources to mount, not both")
    if not args.workspace and not args.sources:
        raise InvalidInput(
            "nothing to mount: give DATASET[@REF] ..., s3://bucket[/prefix] or --workspace NAME"
        )
    if args.commit_to and not args.workspace:
        raise InvalidInput("--commit-to only applies to --workspace mounts")
    if args.author is not None and not args.commit_to:
        raise InvalidInput("--author names the author of what --commit-to commits: give --commit-to too")
    if args.author is not None:
        # checked now, as the commit at unmount will: a name the catalog refuses (bytes that are
        # not UTF-8 in argv, e.g. a Latin-1 "Jos\xe9") let the mount take writes for hours, then
        # failed its commit, and every recovery by `datahub umount` again (review17d)
        check_text(args.author, "--author (the author of what --commit-to commits):")
        if not args.author.strip():
            # "" was committed as an empty author by the live daemon but as the login name of
            # whoever ran `datahub umount` at a recovery (the record keeps "" for "not given")
            raise InvalidInput("--author is empty: give a name, or leave --author out for your login name")
    if args.quota is not None and (not args.workspace or args.quota <= 0):
        raise InvalidInput("--quota applies to --workspace mounts and must be a positive number of bytes")
    if args.writeback_cache and (not args.workspace or args.passthrough):
        raise InvalidInput(
            "--writeback-cache applies to --workspace mounts without --passthrough (the kernel "
            "refuses passthrough next to its write-back cache)"
        )
    if args.writes_in_c and (not args.workspace or args.passthrough or args.writeback_cache or args.quota):
        raise InvalidInput(
            "--writes-in-c applies to --workspace mounts without --passthrough, --writeback-cache or "
            '--quota (docs/writeback.md, "WRITEs answered in C")'
        )
    if "://" in args.mountpoint and len(args.sources) == 1 and "://" not in args.sources[0]:
        # `datahub mount s3://bucket MNT` (source first, as rclone/s3fs take it) means the same
        args.mountpoint, args.sources = args.sources[0], [args.mountpoint]
    require_catalog(args, ctx)
    mountpoint = daemon.check_mountpoint(args.mountpoint, ctx.config.home_path)  # cleans a stale one
    _configure(args, ctx)
    home = ctx.config.home_path
    if args.background:
        argv = [a for a in sys.argv[1:] if a != "--background"]
        log_path = daemon.record_path(home, mountpoint).with_suffix(".log")
        pid = daemon.start_background(argv, log_path)
        shown = _where_files_are(args, mountpoint)
        ctx.emit(
            {"mountpoint": mountpoint, "pid": pid, "log": str(log_path), "paths": shown},
            text=f"mounted {mountpoint} (pid {pid})"
            + ("".join(f"\n  {spec}: {path}" for spec, path in shown.items()) if shown else ""),
        )
        return 0
    if log.level == logging.NOTSET and logging.getLogger().level > logging.INFO:
        log.setLevel(logging.INFO)  # say what is mounted (the snapshot id) even without -v
    from fuse_adapter import mount_assembly as assembly

    common = {
        "mountpoint": mountpoint,
        "uid": args.uid,
        "gid": args.gid,
        "allow_other": args.allow_other,
        "threads": args.threads,
        "ready_fd": args.ready_fd,
    }
    if args.workspace:
        workspace = assembly.WorkspaceMount(
            **common,
            workspace=args.workspace,
            commit_to=args.commit_to,
            author=args.author,
            quota=args.quota,
            write_passthrough=args.passthrough,
            writeback_cache=args.writeback_cache,
            c_writes=args.writes_in_c,
            request_loop=args.request_loop,
        )
        return assembly.serve_workspace(workspace, ctx)
    return assembly.serve_readonly(readonly_mount(args, common), ctx)


def require_catalog(args: argparse.Namespace, ctx: CliContext) -> None:
    """Refuse, before anything starts or is written, a mount that needs a catalog where there is
    none (an SQLite file that does not exist): dataset versions are read from it, and
    ``--commit-to`` commits into it at unmount. As every command that reads a catalog, exit 3
    naming where it looked and ``datahub init``, leaving no tree behind.

    Why (newuser15): a ``--commit-to`` mount took a training run's writes and only ``datahub
    umount`` failed with "no catalog", committing nothing; a version mount under a mistyped
    ``--home`` made an empty catalog and a tree there, then said the dataset was not found. A
    bucket mount or a plain workspace keeps working without one."""
    if not args.commit_to and all("://" in s for s in args.sources):
        return
    try:
        ctx.existing_catalog_url()
    except NotFound as exc:
        if args.commit_to:
            raise NotFound(
                f"--commit-to {args.commit_to} commits into a catalog at unmount, and there is none: {exc}"
            ) from None
        raise


def readonly_mount(args: argparse.Namespace, common: dict) -> ReadOnlyMount:
    """The read-only mount the flags describe (``mount_assembly`` reads no flags)."""
    from fuse_adapter.fast_path import Asked
    from fuse_adapter.mount_assembly import ReadOnlyMount

    asked = Asked(
        passthrough=True if args.passthrough else False if args.no_passthrough else None,
        auto=True if args.auto_read_mode else None,
        fastread=not args.no_fastread,
        fastopen=not args.no_fastopen,
        fastloop=not args.no_fastloop,
        io_uring=not args.no_io_uring,
        lookup_in_c=not args.no_lookup_in_c,
    )
    return ReadOnlyMount(
        **common,
        sources=tuple(args.sources),
        use_cache=not args.no_cache,
        warm_up=warm_up_wanted(args),
        prefetch_flag=bool(args.prefetch),
        bucket_warmup=bucket_warmup_mode(args),
        record_snapshot=not args.no_snapshot,
        asked=asked,
    )


def warm_up_wanted(args: argparse.Namespace) -> bool:
    """Whether a read-only mount of dataset versions warms its cache in the background.

    On by default: a training job's first epoch through a plain mount then reads a cache
    that is filling ahead of it, with no datahub code in the script (issue 13 item 5). It
    never hurts the reader: warm-up requests are served after demand reads (origin
    scheduler), skip what is cached, and stop when the cache is full (docs/cache.md
    "Warm-up"). ``--no-cache`` keeps nothing to warm. A bucket snapshot follows its own
    policy (``bucket_warmup_mode``).
    """
    if args.no_cache:
        return False
    return True if args.prefetch is None else args.prefetch


def bucket_warmup_mode(args: argparse.Namespace) -> bool | None:
    """A bucket snapshot's warm-up: True (``--prefetch``), False (``--no-prefetch``, ``--no-cache``)
    or None: automatic (``datahub.cache.warmup_policy``), because a bucket is often far larger
    than what a job reads, and warming it whole would cost a GET per object for nothing."""
    return False if args.no_cache else args.prefetch


def run_umount(args: argparse.Namespace, ctx: CliContext) -> int:
    from fuse_adapter import daemon

    def recover(record: daemon.MountRecord) -> str | None:
        if record.kind != "workspace":
            return None
        # only here: a plain unmount needs none of the FUSE, cache and catalog stack
        from fuse_adapter.mount_assembly import finish_workspace, open_workspace

        # replays the journal of the dead daemon
        workspace = open_workspace(record.workspace, ctx, record.commit_to)
        try:
            # as the mount's --author, not whoever runs the umount
            return finish_workspace(workspace, record.commit_to or None, ctx, record.author or None)
        finally:
            workspace.close()

    outcome = daemon.unmount(
        ctx.config.home_path, args.mountpoint, timeout=args.timeout, recover=recover
    ).outcome
    ctx.emit({"mountpoint": args.mountpoint, "outcome": outcome}, text=f"{args.mountpoint}: {outcome}")
    return 0


def _where_files_are(args, mountpoint: str) -> dict[str, str]:
    """Each dataset version's directory in a version mount (``MOUNT/<dataset>/<v<seq> or
    ref>``, ``layout.VersionSpec.entry``): the mount point itself holds only the datasets'
    names, and a new user's ``ls MOUNT`` found no files there (newuser19). Empty for a
    workspace or a bucket, whose files are at the mount point."""
    from fuse_adapter.layout import VersionSpec

    if args.workspace or any("://" in source for source in args.sources):
        return {}
    specs = [VersionSpec.parse(source) for source in args.sources]
    return {f"{s.dataset}@{s.ref or 'latest'}": str(Path(mountpoint, s.dataset, s.entry())) for s in specs}
