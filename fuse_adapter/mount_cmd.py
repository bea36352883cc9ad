"""``datahub mount`` and ``datahub umount``: FUSE views of dataset versions, buckets and workspaces.

    datahub mount MOUNTPOINT DATASET[@REF] ...        read-only: MOUNTPOINT/<dataset>/v<N>/...
                                                      (warms the cache in the background; --no-prefetch: not)
                                                      (a bucket: warms what fits and readers go through)
                                                      (a stale mount point of a dead daemon is cleaned first)
    datahub mount MOUNTPOINT s3://bucket[/prefix]     read-only snapshot of a bucket (--refresh: new one)
    datahub mount --workspace NAME MOUNTPOINT [--commit-to DATASET]   writable, write-back
    datahub umount MOUNTPOINT                         flush (rw), unmount; cleans stale mounts

The handlers only parse, build the view and hand it to ``fuse_adapter``; everything else
lives there (see docs/fuse.md).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from datahub.console.context import CliContext
from datahub.errors import InvalidInput

if TYPE_CHECKING:
    from datahub.storage.base import ObjectRef
    from fuse_adapter.fuse_ops import ReadOnlyOps
    from fuse_adapter.readonly import ReadOnlyView

log = logging.getLogger("fuse_adapter")

PREFETCH_SORT_LIMIT = 200_000  # above this, warm up in key order, streamed (no list of every ref)


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
        "--quota",
        type=int,
        metavar="BYTES",
        help="workspace: the most bytes its files may hold (df shows it; writes past it fail with ENOSPC)",
    )
    p.add_argument(
        "--refresh", action="store_true", help="bucket: take a new snapshot instead of the last one"
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
        help="read-only: let the kernel serve files of the disk tier itself (FUSE passthrough) instead "
        "of zero-message opens with READs answered in C; each open then costs an OPEN and a RELEASE, "
        "a warm epoch half as fast (the baseline of bench/mount/warm_path.py; docs/fuse.md). "
        "--workspace: stage each new or truncated file on local disk and let the kernel write it "
        "(disk-speed writes, durable in the shared tier at close as ever); msync is durable on "
        "local disk only, and writes after an unmount are not refused (docs/writeback.md)",
    )
    reads.add_argument(
        "--no-passthrough",
        action="store_true",
        help="never use FUSE passthrough: the default for reads (zero-message opens with READs "
        "answered in C; docs/fuse.md) and for workspace writes (each WRITE through the daemon)",
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
    p.add_argument("--uid", type=int, help="owner shown for every file (default: the mounting user)")
    p.add_argument("--gid", type=int, help="group shown for every file (default: the mounting user's)")
    p.add_argument("--allow-other", action="store_true", help="let other users access the mount")
    p.add_argument("--threads", type=int, default=32, help="worker threads for blocking reads (default 32)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", action="store_true", help="stay attached (the default)")
    mode.add_argument("--background", action="store_true", help="detach and return once the mount is ready")
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    p.set_defaults(func=run_mount)

    u = sub.add_parser("umount", help="flush (workspace) and unmount; also cleans up after a crashed mount")
    u.add_argument("mountpoint")
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
    if args.quota is not None and (not args.workspace or args.quota <= 0):
        raise InvalidInput("--quota applies to --workspace mounts and must be a positive number of bytes")
    if "://" in args.mountpoint and len(args.sources) == 1 and "://" not in args.sources[0]:
        # `datahub mount s3://bucket MNT` (source first, as rclone/s3fs take it) means the same
        args.mountpoint, args.sources = args.sources[0], [args.mountpoint]
    mountpoint = daemon.check_mountpoint(args.mountpoint, ctx.config.home_path)  # cleans a stale one
    _configure(args, ctx)
    home = ctx.config.home_path
    if args.background:
        argv = [a for a in sys.argv[1:] if a != "--background"]
        log_path = daemon.record_path(home, mountpoint).with_suffix(".log")
        pid = daemon.start_background(argv, log_path)
        ctx.emit(
            {"mountpoint": mountpoint, "pid": pid, "log": str(log_path)},
            text=f"mounted {mountpoint} (pid {pid})",
        )
        return 0
    if log.level == logging.NOTSET and logging.getLogger().level > logging.INFO:
        log.setLevel(logging.INFO)  # say what is mounted (the snapshot id) even without -v
    if args.workspace:
        return _serve_workspace(args, ctx, mountpoint)
    return _serve_readonly(args, ctx, mountpoint)


def _serve_readonly(args: argparse.Namespace, ctx: CliContext, mountpoint: str) -> int:
    import os

    from datahub.catalog import open_catalog
    from fuse_adapter import daemon, layout
    from fuse_adapter.bucket_warmup import ObservedSource
    from fuse_adapter.fuse_ops import (
        FASTLOOP,
        MAX_IO,
        URING,
        ReadOnlyOps,
        mount_options,
        request_counter,
        serve,
    )
    from fuse_adapter.source import open_source
    from fuse_adapter.uring import mount_transport

    config = ctx.config
    source = open_source(config, ctx.stores, use_cache=not args.no_cache)

    def catalog_factory():
        return open_catalog(config.resolved_catalog_url)

    urls = [s for s in args.sources if "://" in s]
    if urls and (len(urls) > 1 or len(args.sources) > 1):
        raise InvalidInput("mount one bucket URL at a time, or any number of DATASET[@REF] (not both)")
    stopping = threading.Event()
    bucket_warmup = None
    if urls:
        bucket_warmup = _bucket_warmup(
            args, config, source, ctx.stores.store(urls[0]).url_for(""), mountpoint, stopping
        )
        view, loaders, info = layout.bucket_view(
            urls[0], ctx.stores, catalog_factory, ObservedSource(source, bucket_warmup),
            refresh=args.refresh, whole_max=bucket_list_whole_max(args, config),
            on_by_directory=bucket_warmup.listing_deferred, uid=args.uid, gid=args.gid,
        )  # fmt: skip
    else:
        specs = [layout.VersionSpec.parse(s) for s in args.sources]
        view, loaders, info = layout.version_view(catalog_factory, specs, source, uid=args.uid, gid=args.gid)
    home = config.home_path
    record = daemon.MountRecord(mountpoint, os.getpid(), "readonly", source=info.source)
    if not urls:
        threading.Thread(
            target=_open_stores,
            args=(view, loaders, ctx.stores, stopping),
            name="datahub-stores",
            daemon=True,
        ).start()
    if bucket_warmup is not None:
        log.info("background warm-up: %s", _BUCKET_WARMUP_MODES[bucket_warmup.policy.mode])
        bucket_warmup.start(
            lambda: (ref for loader in loaders for ref in loader.files()),
            lambda: _listed(loaders, stopping),
            want_listing=loaders[0].want_whole,
        )
    elif warm_up_wanted(args):
        log.info("background warm-up: on (--no-prefetch turns it off)")
        from fuse_adapter.version_warmup import VersionWarmup

        warmup = VersionWarmup(mountpoint, info.source, source, flag=bool(args.prefetch))
        threading.Thread(
            target=_prefetch,
            args=(view, loaders, source, warmup, stopping),
            name="datahub-prefetch",
            daemon=True,
        ).start()
    else:
        log.info("background warm-up: off")

    def stop() -> None:
        stopping.set()
        if bucket_warmup is not None:
            bucket_warmup.close()
        source.close()

    def ready() -> None:
        daemon.write_record(home, record)
        log.info("mounted %s at %s", info.source, mountpoint)
        daemon.signal_ready(args.ready_fd)
        say_foreground(args, mountpoint)

    source.watch_requests(request_counter())  # warm-up sees readers the page cache serves
    ops = ReadOnlyOps(
        view,
        threads=args.threads,
        zero_message_open=True,
        passthrough=passthrough_wanted(args, source),
        fastopen=not args.no_fastopen,
        fastloop=not args.no_fastloop,
        fastread=fastread_wanted(args, source),
        lookup_in_c=not args.no_lookup_in_c,
        io_uring=mount_transport(not args.no_io_uring, not args.no_fastloop and FASTLOOP and URING),
    )
    source.report_mount(
        lambda: {
            "mountpoint": mountpoint,
            **ops.passthrough.stats(),
            **ops.fastread.stats(),
            **ops.transport_stats(),
        }
    )
    if ops.passthrough.wanted or ops.fastread.active:  # an evicted page file is let go at once
        getattr(source, "watch_backing", lambda listener: None)(ops.backing_evicted)
        threading.Thread(
            target=_count_c_hits, args=(ops, view, stopping), name="datahub-c-hits", daemon=True
        ).start()
    log.info("opens: %s; READs in C: %s", ops.passthrough.mode, ops.fastread.mode)
    try:
        serve(
            ops,
            mountpoint,
            mount_options(
                fsname=f"datahub:{info.source}"[:200], read_only=True, allow_other=args.allow_other
            ),
            on_ready=ready,
            on_stop=stop,
            readahead_kib=4 * MAX_IO // 1024,
        )
    finally:
        daemon.remove_record(home, mountpoint)
        if ops.passthrough.wanted:  # all released with the session (tests count them)
            pt = ops.passthrough.stats()
            log.info(
                "unmounted: %d backing ids opened, %d closed",
                pt["backing_ids_opened"],
                pt["backing_ids_closed"],
            )
    return 0


def say_foreground(args: argparse.Namespace, mountpoint: str) -> None:
    """A mount started by hand in the foreground says that it holds the shell, and how it ends
    (a user following a tour otherwise waits for a prompt that never comes). A daemon started
    by ``--background`` or the CSI plugin (``--ready-fd``) writes to its log only."""
    if args.ready_fd is None:
        print(
            f"mounted at {mountpoint}; this command runs until `datahub umount {mountpoint}` or Ctrl-C "
            "(--background returns once mounted)",
            file=sys.stderr,
            flush=True,
        )


C_HITS_EVERY = 1.0  # seconds between reports of opens answered in C to the cache


def _count_c_hits(ops: ReadOnlyOps, view: ReadOnlyView, stopping: threading.Event) -> None:
    """Opens and READs pyfuse3 answered in C never reach the cache, which would take hot
    files for cold ones and evict them first: report them as hits, once per file per period."""
    while not stopping.wait(C_HITS_EVERY):
        for ino in ops.passthrough.drain_hits() + ops.fastread.drain_hits():
            try:
                view.backing_hit(ino)
            except Exception as exc:  # a hit not counted must not stop the mount
                log.debug("counting a hit of inode %d: %s", ino, exc)


def passthrough_wanted(args: argparse.Namespace, source) -> bool:
    """Whether a read-only mount asks for FUSE passthrough (``--passthrough``; docs/fuse.md).

    Not by default: passthrough needs an OPEN and a RELEASE per open, which halves a warm
    epoch; zero-message opens with READs answered in C from the same page files serve both
    a warm epoch and SSD-tier hits (:func:`fastread_wanted`). Only a disk tier that writes
    format-3 page files (the object's bytes from offset 0) has files to hand the kernel;
    without one (``--no-cache``, no disk tier, no user xattrs) the mount keeps zero-message
    opens.
    """
    if args.no_passthrough or args.no_cache:
        return False
    if not args.passthrough and (args.no_fastread or fastread_possible(args)):
        return False  # the default: zero-message opens, READs in C
    return bool(getattr(source, "backs_files", lambda: False)())


def fastread_possible(args: argparse.Namespace) -> bool:
    """Whether pyfuse3's C threads can answer READs here (its build has fastread.h and a C
    thread reads the requests); if not, the mount keeps passthrough, the next best for
    SSD-tier hits (a READ through Python costs ten times the daemon CPU)."""
    from fuse_adapter.fuse_ops import FASTREAD

    return FASTREAD and not args.no_fastloop


def fastread_wanted(args: argparse.Namespace, source) -> bool:
    """Whether a read-only mount's C threads answer READs from page files (the default).

    The same files passthrough would hand the kernel (format-3 page files: the object's
    bytes from offset 0), read by pyfuse3's C threads instead, so opens stay zero-message.
    """
    if args.passthrough or args.no_fastread or args.no_cache or not fastread_possible(args):
        return False
    return bool(getattr(source, "backs_files", lambda: False)())


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


_BUCKET_WARMUP_MODES = {
    None: "automatic (a snapshot that fits, or an epoch pattern of reads; --prefetch: all, --no-prefetch: none)",
    True: "on (--prefetch)",
    False: "off",
}


def bucket_list_whole_max(args: argparse.Namespace, config) -> int:
    """Keys a new bucket snapshot lists whole before it lists by directory (0: all of them).

    ``--prefetch`` warms the whole snapshot at once, so it needs the whole listing at once."""
    return 0 if bucket_warmup_mode(args) is True else config.cache.bucket_list_whole_objects


def _bucket_warmup(
    args: argparse.Namespace, config, source, root: str, mountpoint: str, stopping: threading.Event
):
    from datahub.cache.warmup_policy import PolicySettings, WarmupPolicy
    from fuse_adapter.bucket_warmup import BucketWarmup

    c = config.cache
    settings = PolicySettings(
        fits_max_objects=c.bucket_warmup_objects,
        opens=c.bucket_warmup_opens,
        window_seconds=c.bucket_warmup_window_seconds,
        idle_stop_seconds=c.bucket_warmup_idle_seconds,
    )
    return BucketWarmup(source, WarmupPolicy(settings, bucket_warmup_mode(args), root), mountpoint, stopping)


def _listed(loaders, stopping: threading.Event) -> bool:
    """Wait until every listing is in; False if the mount stops first."""
    for loader in loaders:
        while not loader.wait(0.5):
            if stopping.is_set():
                return False
    return True


def _open_stores(view, loaders, stores, stopping: threading.Event) -> None:
    """Open the store of each mounted version's first file once its listing is in.

    Opening an S3 store builds a boto3 client (imports and service models: a few hundred
    ms of CPU); done here, the first read of a large file does not pay it.
    """
    for loader in loaders:
        while not loader.wait(0.5):
            if stopping.is_set():
                return
        try:
            first = next(iter(loader.files()), None)
            if first is not None:
                stores.for_url(first.url)
        except Exception as exc:  # an optimisation: the first read reports the error
            log.debug("opening the store of %s failed: %s", loader.name, exc)


def _prefetch(view, loaders, source, warmup, stopping: threading.Event) -> None:
    """Warm the cache with every file of the mount (after the listings are in), until unmount."""
    if not _listed(loaders, stopping):
        return
    refs = warm_up_order(ref for loader in loaders for ref in loader.files())
    objects = sum(loader.totals()[0] for loader in loaders)
    nbytes = sum(loader.totals()[1] for loader in loaders)
    warmup.run(source, refs, objects, nbytes, stopping)


def warm_up_order(listed: Iterator[ObjectRef], limit: int = PREFETCH_SORT_LIMIT) -> Iterable[ObjectRef]:
    """The order a mount warms its files in: smallest first when there are at most ``limit``
    (the most files ready soonest), else key order, taken from ``listed`` as the warm-up
    goes, so a mount of millions of files never holds a list of every file's ref."""
    first = list(itertools.islice(listed, limit + 1))
    if len(first) <= limit:
        return sorted(first, key=lambda r: r.size)
    return itertools.chain(first, listed)


def _open_workspace(name: str, ctx: CliContext):
    from datahub.writeback import open_workspace

    return open_workspace(name, ctx.config, ctx.stores)


def _finish_workspace(workspace, commit_to: str | None, ctx: CliContext) -> None:
    """Flush everything acknowledged to the object store, then (optionally) commit it."""
    report = workspace.flush(progress=ctx.progress(None, f"flushing workspace {workspace.name}"))
    log.info("flushed workspace %s: %s", workspace.name, report)
    if commit_to:
        from datahub.workspaces import commit_workspace

        version = commit_workspace(workspace, ctx.catalog, commit_to, message=f"workspace {workspace.name}")
        log.info("committed workspace %s as %s@v%d", workspace.name, commit_to, version.seq)


def _serve_workspace(args: argparse.Namespace, ctx: CliContext, mountpoint: str) -> int:
    import os

    from fuse_adapter import daemon
    from fuse_adapter.fuse_ops import WorkspaceOps, mount_options, serve
    from fuse_adapter.workspace import WorkspaceView

    workspace = _open_workspace(args.workspace, ctx)
    quota = None
    if args.quota:
        from fuse_adapter.quota import Quota

        quota = Quota.measure(workspace, args.quota)
    view = WorkspaceView(workspace, uid=args.uid, gid=args.gid, quota=quota)
    home = ctx.config.home_path
    record = daemon.MountRecord(
        mountpoint, os.getpid(), "workspace", source=args.workspace,
        workspace=args.workspace, commit_to=args.commit_to or "",
    )  # fmt: skip

    became_ready = threading.Event()

    def ready() -> None:
        daemon.write_record(home, record)
        log.info("mounted workspace %s at %s", args.workspace, mountpoint)
        daemon.signal_ready(args.ready_fd)
        say_foreground(args, mountpoint)
        became_ready.set()

    def stop() -> None:
        # A mount that failed at start-up (e.g. its record could not be written: disk full)
        # exits with an error, and its caller mounts again. Committing here would make a
        # version of whatever the workspace held at that moment, and the retry a second one
        # under the same name (found by the chaos soak, seed 26). The files stay in the
        # workspace's journal for the mount that succeeds.
        commit_to = args.commit_to if became_ready.is_set() else None
        if args.commit_to and commit_to is None:
            log.warning(
                "workspace %s: the mount never became ready, so nothing was committed to %s; "
                "its files stay in the workspace for the next mount",
                args.workspace,
                args.commit_to,
            )
        try:
            view.release_all()
            _finish_workspace(workspace, commit_to, ctx)
        finally:
            workspace.close()

    try:
        serve(
            WorkspaceOps(view, threads=args.threads, write_passthrough=args.passthrough),
            mountpoint,
            mount_options(
                fsname=f"datahub-ws:{args.workspace}", read_only=False, allow_other=args.allow_other
            ),
            on_ready=ready,
            on_stop=stop,
        )
    finally:
        daemon.remove_record(home, mountpoint)
    return 0


def run_umount(args: argparse.Namespace, ctx: CliContext) -> int:
    from fuse_adapter import daemon

    def recover(record: daemon.MountRecord) -> None:
        if record.kind != "workspace":
            return
        workspace = _open_workspace(record.workspace, ctx)  # replays the journal of the dead daemon
        try:
            _finish_workspace(workspace, record.commit_to or None, ctx)
        finally:
            workspace.close()

    outcome = daemon.unmount(ctx.config.home_path, args.mountpoint, timeout=args.timeout, recover=recover)
    ctx.emit({"mountpoint": args.mountpoint, "outcome": outcome}, text=f"{args.mountpoint}: {outcome}")
    return 0
