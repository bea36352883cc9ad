"""Assembling a mount: the parts of a read-only mount (source, layout, warm-up, fast path,
the shim) or of a workspace mount, put together and served until unmounted.

``mount_cmd`` parses the command line into a :class:`ReadOnlyMount` or a
:class:`WorkspaceMount` and hands it here; this module reads no flags. See docs/fuse.md.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from dataclasses import dataclass

from datahub.cache.warmup_policy import PolicySettings, WarmupPolicy
from datahub.catalog import open_catalog
from datahub.console.context import CliContext, as_typed
from datahub.errors import Conflict, InvalidInput
from fuse_adapter import daemon, layout
from fuse_adapter.bucket_access import ObjectAccess
from fuse_adapter.bucket_warmup import BucketWarmup, ObservedSource
from fuse_adapter.fast_path import Asked, decide
from fuse_adapter.fuse_ops import (
    BUILD,
    MAX_IO,
    ReadOnlyOps,
    WorkspaceOps,
    c_requests,
    dispatch_stats,
    mount_options,
)
from fuse_adapter.fuse_session import serve
from fuse_adapter.mount_sys import request_counter
from fuse_adapter.paged_tree import PagedTree
from fuse_adapter.readonly import ReadOnlyView
from fuse_adapter.source import open_source
from fuse_adapter.uring import mount_transport
from fuse_adapter.version_warmup import VersionWarmup
from fuse_adapter.warmup_order import warm_up_order

log = logging.getLogger("fuse_adapter")

# The write-back stack (datahub.writeback, LMDB) is imported by the workspace functions
# only: a read-only mount daemon starts without it.


@dataclass(frozen=True)
class MountSettings:
    """What every mount is told by its command line."""

    mountpoint: str
    uid: int | None = None
    gid: int | None = None
    allow_other: bool = False
    threads: int = 32
    #: a descriptor to write to once mounted (``--background``, the CSI plugin); None: by hand
    ready_fd: int | None = None


@dataclass(frozen=True)
class ReadOnlyMount(MountSettings):
    """A read-only mount of dataset versions (``DATASET[@REF] ...``) or of one bucket URL."""

    sources: tuple[str, ...] = ()
    use_cache: bool = True
    #: a version mount warms its files in the background
    warm_up: bool = True
    #: the warm-up was asked for by ``--prefetch`` (its stats say "flag")
    prefetch_flag: bool = False
    #: a bucket mount's warm-up: True, False, or None (automatic: ``datahub.cache.warmup_policy``)
    bucket_warmup: bool | None = None
    #: a bucket mount commits its listing as the snapshot's next version (``--no-snapshot``: not)
    record_snapshot: bool = True
    #: the read modes the flags ask for (``fast_path``)
    asked: Asked = Asked()


@dataclass(frozen=True)
class WorkspaceMount(MountSettings):
    """A writable mount of a write-back workspace."""

    workspace: str = ""
    commit_to: str | None = None
    #: the author of the version committed at unmount (None: the login name)
    author: str | None = None
    quota: int | None = None
    #: stage new files on local disk and let the kernel write them (``--passthrough``)
    write_passthrough: bool = False
    #: the kernel's write-back cache on the daemon path (``--writeback-cache``)
    writeback_cache: bool = False
    #: stage new files and answer their WRITEs in pyfuse3's C reader thread (``--writes-in-c``)
    c_writes: bool = False
    #: who runs the requests: pyfuse3's C threads ("c", the default) or its trio loop ("trio")
    request_loop: str = "c"


def serve_readonly(m: ReadOnlyMount, ctx: CliContext) -> int:
    """Assemble a read-only mount (source, layout, warm-up, fast path) and serve it until
    unmounted. Blocks."""
    mountpoint = m.mountpoint
    config = ctx.config
    if config.cache.read_mode_tick_seconds <= 0 or config.cache.read_mode_drain_seconds < 0:
        raise InvalidInput(
            f"cache.read_mode_tick_seconds must be positive ({config.cache.read_mode_tick_seconds}) and "
            f"cache.read_mode_drain_seconds not negative ({config.cache.read_mode_drain_seconds}): "
            "fix them in the configuration"
        )
    source = open_source(config, ctx.stores, use_cache=m.use_cache)

    def catalog_factory():
        return open_catalog(config.resolved_catalog_url, retry=config.catalog)

    stopping = threading.Event()
    bucket_warmup = None
    access_stats = dict

    def stop() -> None:
        """Stop the background work and close the cache, once: at the unmount (``serve``'s
        ``on_stop``) or when the start fails before it serves, so the next start finds the
        cache closed instead of rebuilding its index as after a crash."""
        if stopped.is_set():
            return
        stopped.set()
        stopping.set()
        if bucket_warmup is not None:
            bucket_warmup.close()
        source.close()

    stopped = threading.Event()
    try:  # a mount that fails before it serves (no such dataset) closes its cache: the next
        # start would otherwise rebuild its index, as after a crash
        urls = [s for s in m.sources if "://" in s]
        if urls and (len(urls) > 1 or len(m.sources) > 1):
            raise InvalidInput("mount one bucket URL at a time, or any number of DATASET[@REF] (not both)")
        if urls:
            bucket_warmup = _bucket_warmup(
                m, config, source, ctx.stores.store(urls[0]).url_for(""), mountpoint, stopping
            )
            # the node's cache is shared: S3 must have let this mount's credentials read an
            # object before its cached bytes are served here (fuse_adapter.bucket_access)
            access = ObjectAccess(ctx.stores)
            access_stats = access.stats
            view, loaders, info = layout.bucket_view(
                urls[0], ctx.stores, catalog_factory, ObservedSource(source, bucket_warmup, access),
                whole_max=bucket_list_whole_max(m, config),
                on_by_directory=bucket_warmup.listing_deferred, uid=m.uid, gid=m.gid,
                record=m.record_snapshot, shared=m.allow_other,
            )  # fmt: skip
        else:
            specs = [layout.VersionSpec.parse(s) for s in m.sources]
            view, loaders, info = layout.version_view(catalog_factory, specs, source, uid=m.uid, gid=m.gid)
    except BaseException:
        stop()
        raise
    home = config.home_path
    record = daemon.MountRecord(mountpoint, os.getpid(), "readonly", source=info.source)
    ops: ReadOnlyOps | None = None
    try:
        threading.Thread(
            target=_when_quiet,
            args=(view, loaders, None if urls else ctx.stores, stopping),
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
        elif m.warm_up:
            log.info("background warm-up: on (--no-prefetch turns it off)")
            warmup = VersionWarmup(mountpoint, info.source, source, flag=m.prefetch_flag)
            threading.Thread(
                target=_prefetch,
                args=(view, loaders, source, warmup, stopping),
                name="datahub-prefetch",
                daemon=True,
            ).start()
        else:
            log.info("background warm-up: off")

        def ready() -> None:
            daemon.write_record(home, record)
            log.info("mounted %s at %s", info.source, mountpoint)
            daemon.signal_ready(m.ready_fd)
            say_foreground(m, ctx.command)

        source.watch_requests(request_counter(c_requests))  # warm-up sees readers the page cache serves
        backs_files = m.use_cache and bool(getattr(source, "backs_files", lambda: False)())
        transport = mount_transport(m.asked.io_uring, m.asked.fastloop and BUILD.fastloop and BUILD.uring)
        fast = decide(m.asked, BUILD, backs_files=backs_files, transport=transport)
        log.info("fast path: %s", fast.summary())
        ops = ReadOnlyOps(view, fast, threads=m.threads, drain_seconds=config.cache.read_mode_drain_seconds)
        source.report_mount(
            lambda: {
                "mountpoint": mountpoint,
                **ops.passthrough.stats(),
                **ops.fastread.stats(),
                **ops.read_mode.stats(),
                **ops.transport_stats(),
                **namespace_stats(view.tree),
                "gc_frozen_objects": daemon.frozen_objects(),
                "gc_full_collections": gc.get_stats()[2]["collections"],
                **access_stats(),
            }
        )
        if ops.passthrough.wanted or ops.fastread.active:  # an evicted page file is let go at once
            getattr(source, "watch_backing", lambda listener: None)(ops.backing_evicted)
            threading.Thread(
                target=_count_c_hits,
                args=(ops, view, stopping, config.cache.read_mode_tick_seconds),
                name="datahub-c-hits",
                daemon=True,
            ).start()
        log.info(
            "opens: %s; READs in C: %s; read mode: %s",
            ops.passthrough.mode,
            ops.fastread.mode,
            ops.read_mode.stats()["read_mode"],
        )
        serve(
            ops,
            mountpoint,
            mount_options(fsname=f"datahub:{info.source}"[:200], read_only=True, allow_other=m.allow_other),
            on_ready=ready,
            on_stop=stop,
            readahead_kib=4 * MAX_IO // 1024,
        )
    finally:
        stop()  # no-op after serve's on_stop; else the mount itself failed (a bad option, /dev/fuse)
        daemon.remove_record(home, mountpoint)
        if ops is not None and ops.passthrough.wanted:  # all released with the session (tests count them)
            pt = ops.passthrough.stats()
            log.info(
                "unmounted: %d backing ids opened, %d closed",
                pt["backing_ids_opened"],
                pt["backing_ids_closed"],
            )
    return 0


def say_foreground(m: MountSettings, command: str = "datahub") -> None:
    """A mount started by hand in the foreground says that it holds the shell, and how it ends
    (a user following a tour otherwise waits for a prompt that never comes). A daemon started
    by ``--background`` or the CSI plugin (``--ready-fd``) writes to its log only.
    ``command``: how the user runs datahub (``CliContext.command``: ``.venv/bin/datahub --home
    var`` after ``make run``, where a bare ``datahub`` is not found)."""
    mountpoint = m.mountpoint
    if m.ready_fd is None:
        print(
            as_typed(
                f"mounted at {mountpoint}; this command runs until `datahub umount {mountpoint}` or Ctrl-C ",
                command,
            )
            + "(--background returns once mounted)",
            file=sys.stderr,
            flush=True,
        )


def _count_c_hits(ops: ReadOnlyOps, view: ReadOnlyView, stopping: threading.Event, every: float) -> None:
    """Opens and READs pyfuse3 answered in C never reach the cache, which would take hot
    files for cold ones and evict them first: report them as hits, once per file per period
    (``every``: ``cache.read_mode_tick_seconds``, also the read mode's tick)."""
    while not stopping.wait(every):
        ops.read_mode_tick()  # the automatic read mode's evidence, once a tick
        ops.sweep_backing()  # page files another process evicted: their space back
        inos = ops.passthrough.drain_hits() + ops.fastread.drain_hits()
        try:
            view.backing_hits(inos)
        except Exception as exc:  # hits not counted must not stop the mount
            log.debug("counting %d hits: %s", len(inos), exc)


_BUCKET_WARMUP_MODES = {
    None: "automatic (a snapshot that fits, or an epoch pattern of reads; --prefetch: all, --no-prefetch: none)",
    True: "on (--prefetch)",
    False: "off",
}


def bucket_list_whole_max(m: ReadOnlyMount, config) -> int:
    """Keys a new bucket snapshot lists whole before it lists by directory (0: all of them).

    ``--prefetch`` warms the whole snapshot at once, so it needs the whole listing at once."""
    return 0 if m.bucket_warmup is True else config.cache.bucket_list_whole_objects


def _bucket_warmup(m: ReadOnlyMount, config, source, root: str, mountpoint: str, stopping: threading.Event):
    c = config.cache
    settings = PolicySettings(
        fits_max_objects=c.bucket_warmup_objects,
        opens=c.bucket_warmup_opens,
        window_seconds=c.bucket_warmup_window_seconds,
        idle_stop_seconds=c.bucket_warmup_idle_seconds,
    )
    return BucketWarmup(source, WarmupPolicy(settings, m.bucket_warmup, root), mountpoint, stopping)


def _listed(loaders, stopping: threading.Event) -> bool:
    """Wait until every listing is in; False if the mount stops first."""
    for loader in loaders:
        while not loader.wait(0.5):
            if stopping.is_set():
                return False
    return True


#: seconds without a directory listed from the catalog before the stores are opened
STORES_QUIET_S = 1.0


def _when_quiet(view, loaders, stores, stopping: threading.Event) -> None:
    """Once the namespace has been quiet for ``STORES_QUIET_S`` (no directory listed from the
    catalog): open the store of each mounted version's first file (``stores``; a version
    mount, once its listing is in), then freeze the daemon's long-lived objects.

    Opening an S3 store imports the SDK and builds its session and lean GET (with an endpoint
    URL the SDK's client, and its service models, wait for a call that needs them: a
    listing, a multipart upload; ``datahub.storage.s3._Parts``); done here, the first read of
    a large file does not pay it. Started at once, it ran beside the first ``ls`` after
    mounting and held the GIL through much of it (the
    first cold listing's daemon CPU and wall time both carried it); a reader that opens a
    file before the quiet second opens the store itself (``StoreRegistry`` is shared).
    Then the long-lived objects (a client's ~95,000 among them, where one was built) are frozen
    (:func:`daemon.freeze_long_lived`: a full collection first, 0.1-0.4 s with the GIL held,
    hence also after the quiet second), so full GC collections stop scanning them. A bucket
    mount (``stores`` None) built its client before serving and only freezes.
    """
    if stores is not None:
        for loader in loaders:
            while not loader.wait(0.5):
                if stopping.is_set():
                    return
    listed = -1
    while (now := getattr(view.tree, "loads", 0)) != listed:
        listed = now
        if stopping.wait(STORES_QUIET_S):
            return
    for loader in loaders if stores is not None else ():
        try:
            first = next(iter(loader.files()), None)
            if first is not None:
                stores.for_url(first.url)
        except Exception as exc:  # an optimisation: the first read reports the error
            log.debug("opening the store of %s failed: %s", loader.name, exc)
    daemon.freeze_long_lived()  # the S3 client's model data is here now: out of the GC's scans


def _prefetch(view, loaders, source, warmup, stopping: threading.Event) -> None:
    """Warm the cache with every file of the mount (after the listings are in), until unmount."""
    if not _listed(loaders, stopping):
        return
    refs = warm_up_order(ref for loader in loaders for ref in loader.files())
    objects = sum(loader.totals()[0] for loader in loaders)
    nbytes = sum(loader.totals()[1] for loader in loaders)
    warmup.run(source, refs, objects, nbytes, stopping)


def open_workspace(name: str, ctx: CliContext, commit_to: str | None = None):
    """A workspace by name (replays the journal of a dead daemon), under its writer lease in
    the catalog when there is one (``datahub.workspaces.leased``): another node's open fails.
    The lease names ``commit_to``: a server lets only its writers take it."""
    from datahub import writeback
    from datahub.workspaces import leased

    lease = ctx.catalog.store if leased(ctx.config.resolved_catalog_url) else None
    return writeback.open_workspace(name, ctx.config, ctx.stores, lease=lease, commit_to=commit_to or "")


def finish_workspace(workspace, commit_to: str | None, ctx: CliContext, author: str | None = None) -> str:
    """Flush everything acknowledged to the object store, then (optionally) commit it.

    Returns what it did, in words (``datahub umount`` prints it: the user learns which version
    holds the files, not only that the mount stopped)."""
    report = workspace.flush(progress=ctx.progress(None, f"flushing workspace {workspace.name}"))
    log.info("flushed workspace %s: %s", workspace.name, report)
    if not commit_to:
        return f"workspace {workspace.name} flushed (no --commit-to: nothing committed)"
    from datahub.console.context import author_or_default
    from datahub.workspaces import commit_workspace

    # --author, else the login name, as every command that makes a version records it (the
    # browser showed "—")
    version = commit_workspace(
        workspace,
        ctx.catalog,
        commit_to,
        message=f"workspace {workspace.name}",
        author=author_or_default(author),
    )
    if version is None:
        log.info("workspace %s is empty: nothing committed to %s", workspace.name, commit_to)
        return f"workspace {workspace.name} flushed; it is empty, so nothing was committed to {commit_to}"
    log.info("committed workspace %s as %s@v%d", workspace.name, commit_to, version.seq)
    return f"workspace {workspace.name} flushed; its files are {commit_to}@v{version.seq}"


def serve_workspace(m: WorkspaceMount, ctx: CliContext) -> int:
    """Assemble a writable workspace mount and serve it until unmounted (then flush, and
    commit if asked). Blocks."""
    from fuse_adapter.allocator import keep_large_buffers
    from fuse_adapter.quota import Quota
    from fuse_adapter.workspace import WorkspaceView, owner_only, shown_to_others

    mountpoint = m.mountpoint
    try:
        workspace = open_workspace(m.workspace, ctx, m.commit_to)
    except Conflict as exc:
        held = daemon.workspace_mount(ctx.config.home_path, m.workspace, exc.details.get("pid"))
        if held is None:
            raise
        raise Conflict(
            f"workspace {m.workspace!r} is already open for writing by the mount at {held.mountpoint} "
            f"(pid {held.pid}), and a workspace has one writer: unmount it there first "
            f"(`datahub umount {held.mountpoint}`), or mount another workspace name",
            pid=held.pid,
            mountpoint=held.mountpoint,
        ) from None
    quota = Quota.measure(workspace, m.quota) if m.quota else None
    view = WorkspaceView(workspace, uid=m.uid, gid=m.gid, quota=quota)
    home = ctx.config.home_path
    record = daemon.MountRecord(
        mountpoint, os.getpid(), "workspace", source=m.workspace,
        workspace=m.workspace, commit_to=m.commit_to or "", author=m.author or "",
    )  # fmt: skip

    became_ready = threading.Event()

    def ready() -> None:
        daemon.write_record(home, record)
        log.info("mounted workspace %s at %s", m.workspace, mountpoint)
        daemon.signal_ready(m.ready_fd)
        say_foreground(m, ctx.command)
        became_ready.set()

    def stop() -> None:
        # A mount that failed at start-up (e.g. its record could not be written: disk full)
        # exits with an error, and its caller mounts again. Committing here would make a
        # version of whatever the workspace held at that moment, and the retry a second one
        # under the same name (found by the chaos soak, seed 26). The files stay in the
        # workspace's journal for the mount that succeeds.
        if view.cwrites is not None:  # what the C reader thread wrote (fastwrite.h; the tests read it)
            log.info("workspace %s: WRITEs answered in C: %s", m.workspace, view.cwrites.stats())
        if m.request_loop == "c":  # the request loop in C (pyfuse3.dispatch; the tests read it)
            log.info("workspace %s: requests run by C threads: %s", m.workspace, dispatch_stats())
        commit_to = m.commit_to if became_ready.is_set() else None
        if m.commit_to and commit_to is None:
            log.warning(
                "workspace %s: the mount never became ready, so nothing was committed to %s; "
                "its files stay in the workspace for the next mount",
                m.workspace,
                m.commit_to,
            )
        try:
            view.release_all()
            said = finish_workspace(workspace, commit_to, ctx, m.author)
            # nothing open any more: the close below can acknowledge nothing the commit missed
            settled = not workspace.open_files()
        finally:
            workspace.close()
        if settled and commit_to == m.commit_to:
            # after the close (its lease released): ``datahub umount`` (the CSI plugin) need not
            # reopen the workspace to re-check this flush and commit
            daemon.write_finished(home, mountpoint, said)

    keep_large_buffers()  # the daemon path's 1 MiB WRITE buffers reused, not faulted in anew
    try:
        serve(
            WorkspaceOps(
                view,
                threads=m.threads,
                write_passthrough=m.write_passthrough,
                writeback_cache=m.writeback_cache,
                c_writes=m.c_writes,
                request_loop=m.request_loop,
                shared=shown_to_others(allow_other=m.allow_other, uid=view.uid, gid=view.gid),
            ),
            mountpoint,
            mount_options(
                fsname=f"datahub-ws:{m.workspace}",
                read_only=False,
                allow_other=m.allow_other,
                kernel_permissions=not owner_only(allow_other=m.allow_other, uid=view.uid, gid=view.gid),
            ),
            on_ready=ready,
            on_stop=stop,
        )
    finally:
        daemon.remove_record(home, mountpoint)
    return 0


def namespace_stats(tree: object) -> dict[str, int]:
    """The paged namespace's figures (directory pages held against their budget, listings and
    probes sent to the catalog), prefixed ``namespace_``: the memory a version mount holds for
    its listing is bounded by that budget, not by the version's size, and an operator checks
    it here (``datahub cache stats --json``, ``datahub_mount_namespace_bytes``). A tree that
    keeps no pages (a bucket mount's) reports nothing."""
    if not isinstance(tree, PagedTree):
        return {}
    return {f"namespace_{key}": value for key, value in tree.stats().items()}
