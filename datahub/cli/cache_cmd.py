"""``datahub cache stats|pin|unpin|pins|flush|journals|forget-journal`` and ``datahub prefetch DATASET@VERSION``.

The cache knows nothing of the catalog, so this is where versions become object refs:
records are listed from the catalog here and handed to the cache as a stream. Counters of
other processes come from their stats snapshots (``datahub.cache.stats``); disk usage and
pins from the disk tier's index, so ``stats`` works with no cache process running.
``cache flush`` belongs to the write-back engineer: ``datahub/cli/flush_cmd.py``'s
``add_flush_parser`` adds it under ``cache`` when present; ``journals`` and
``forget-journal`` (the shared tier's journal prefixes) come from ``datahub/cli/journals_cmd.py``.
"""

from __future__ import annotations

import argparse
import threading

from datahub.cli.flush_cmd import add_flush_parser
from datahub.cli.journals_cmd import add_journals_parsers
from datahub.cli.version_cmd import split_ref
from datahub.console.context import CliContext, shown
from datahub.validation import check_prefix
from datahub.words import counted

TIER_COLUMNS = ("tier", "used", "limit", "pages", "hits", "misses", "hit_ratio", "evictions", "promotions", "demotions", "errors", "corrupt")  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="inspect and steer the local data cache")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)

    s = csub.add_parser("stats", help="per tier: bytes used/limit, hits, misses, evictions, dirty bytes")
    s.set_defaults(func=stats)

    pin = csub.add_parser("pin", help="keep a dataset version on disk (and warm it) until unpinned")
    pin.add_argument("version", metavar="DATASET@VERSION", help="the version to keep (pets@3, pets@golden)")
    pin.add_argument("--prefix", default="", help="only records whose key starts with this")
    pin.add_argument("--no-prefetch", action="store_true", help="record the pin without warming the pages")
    pin.set_defaults(func=pin_version)

    unpin = csub.add_parser("unpin", help="let a pinned version be evicted again")
    unpin.add_argument(
        "version", metavar="DATASET@VERSION", help="the pinned version (as cache pins lists it)"
    )
    unpin.set_defaults(func=unpin_version)

    pins = csub.add_parser("pins", help="list pins")
    pins.set_defaults(func=list_pins)

    add_flush_parser(csub)  # `cache flush`: write-back workspaces
    add_journals_parsers(csub)  # `cache journals`, `cache forget-journal`: the shared tier's journal prefixes

    pf = sub.add_parser("prefetch", help="warm the cache with a dataset version (resumable)")
    pf.add_argument("version", metavar="DATASET@VERSION", help="the version to warm (pets@3, pets@golden)")
    pf.add_argument("--prefix", default="", help="only records whose key starts with this")
    pf.set_defaults(func=prefetch)


def _cache(ctx: CliContext):
    from datahub.cache import open_cache

    return ctx.service("cache", lambda: open_cache(ctx.config, ctx.stores))


def _resolve(ctx: CliContext, spec: str):
    name, ref = split_ref(spec)
    version = ctx.catalog.resolve(name, ref)
    return name, version, f"{name}@v{version.seq}"


def _warm(ctx: CliContext, name: str, version, prefix: str, label: str) -> int:
    """Warm ``prefix`` of the version. A prefix under which there is no record says so on
    stderr, with what is there, as ``ls`` does: ``prefetch pets@v1 --prefix trian/`` said only
    "0 objects: 0 pages fetched …, 0 already cached" and exited 0, a typo read as a warm cache
    (newuser71)."""
    cache = _cache(ctx)
    records = ctx.catalog.list_records(name, version.seq, prefix=prefix)
    total = None if prefix else version.record_count
    cancel = threading.Event()
    listed = 0

    def refs():
        nonlocal listed
        for record in records:
            listed += 1
            yield record.ref

    with ctx.progress(total, label) as progress:
        report = cache.prefetch(refs(), progress=progress, cancel=cancel)
    ctx.emit(
        report.as_dict() | {"version": f"{name}@v{version.seq}"},
        # each failure one line: its URL (the record's writer's) and error may hold a newline
        text="\n".join([f"{label}: {report}", *map(shown, report.error_lines())]),
    )
    if prefix and not listed and not ctx.json_output:
        from datahub.cli.version_cmd import nothing_listed

        print(nothing_listed(ctx, name, f"v{version.seq}", prefix, None), file=ctx.err)
    return 1 if report.failed else 0


def prefetch(args: argparse.Namespace, ctx: CliContext) -> int:
    name, version, label = _resolve(ctx, args.version)
    return _warm(ctx, name, version, check_prefix(args.prefix), f"prefetch {label}")


def pin_version(args: argparse.Namespace, ctx: CliContext) -> int:
    name, version, pin_name = _resolve(ctx, args.version)
    prefix = check_prefix(args.prefix)
    pin_name += f":{prefix}" if prefix else ""
    refs = (r.ref for r in ctx.catalog.list_records(name, version.seq, prefix=prefix))
    count = _cache(ctx).pins.pin(pin_name, refs)
    if args.no_prefetch:
        ctx.emit({"pinned": pin_name, "objects": count})
        return 0
    return _warm(ctx, name, version, prefix, f"pin {pin_name}")


def unpin_version(args: argparse.Namespace, ctx: CliContext) -> int:
    spec, _, prefix = args.version.partition(":")
    _, _, pin_name = _resolve(ctx, spec)
    pin_name += f":{prefix}" if prefix else ""
    found = _cache(ctx).pins.unpin(pin_name)
    ctx.emit(
        {"unpinned": pin_name, "found": found},
        text=f"unpinned {pin_name}" if found else f"{pin_name} was not pinned",
    )
    return 0 if found else 3


def list_pins(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.cache.index import open_index

    index_dir = ctx.config.resolved_disk_dir / "index"
    pins = {}
    if index_dir.is_dir():
        index = open_index(index_dir)
        try:
            pins = index.pins()
        finally:
            index.close()
    ctx.emit([{"pin": name, "objects": n} for name, n in sorted(pins.items())], columns=("pin", "objects"))
    return 0


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def stats(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.cache.index import open_index
    from datahub.cache.stats import read_snapshots, stats_dir, summarize
    from datahub.writeback import workspace_stats

    snapshots = read_snapshots(stats_dir(ctx.config))
    tiers = summarize(snapshots)
    index_dir = ctx.config.resolved_disk_dir / "index"
    pins: dict[str, int] = {}
    if index_dir.is_dir():  # disk usage is known without any cache process running
        index = open_index(index_dir)
        try:
            disk = tiers.setdefault("disk", {"tier": "disk", "limit_bytes": ctx.config.cache.disk_bytes})
            disk["used_bytes"], disk["entries"], pins = index.used(), index.count(), index.pins()
        finally:
            index.close()
    workspaces = list(workspace_stats(ctx.config))
    schedulers = [
        {"pid": s["pid"], **s["origin"]["scheduler"]} for s in snapshots if "scheduler" in s.get("origin", {})
    ]
    warmups = [{"pid": s["pid"], **w} for s in snapshots for w in s.get("warmups", [])]
    mounts = [{"pid": s["pid"], **m} for s in snapshots for m in s.get("mounts", [])]
    backing = [{"pid": s["pid"], **s["backing"]} for s in snapshots if "backing" in s]
    workers = [{"pid": s["pid"], **s["fetch_workers"]} for s in snapshots if "fetch_workers" in s]
    result = {
        "processes": [s["pid"] for s in snapshots],
        "tiers": list(tiers.values()),
        "pins": pins,
        "origin_schedulers": schedulers,
        "warmups": warmups,
        "mounts": mounts,
        "backing_files": backing,
        "fetch_workers": workers,
        "workspaces": workspaces,
    }
    if ctx.json_output:
        ctx.emit(result)
        return 0
    rows = [
        {
            "tier": t["tier"],
            "used": _human(t.get("used_bytes", 0)),
            "limit": _human(t.get("limit_bytes", 0)),
            "pages": t.get("entries", "-"),
            **{c: t.get(c, "-") for c in TIER_COLUMNS[4:]},
        }
        for t in tiers.values()
    ]
    ctx.emit(rows, columns=TIER_COLUMNS)
    ctx.emit(
        None, text=f"counters from {counted(len(snapshots), 'running cache process')}; pins: {len(pins)}"
    )
    for sched in schedulers:
        ctx.emit(None, text=_scheduler_line(sched))
    for warmup in warmups:
        ctx.emit(None, text=_warmup_line(warmup))
    for m in mounts:
        ctx.emit(None, text=_mount_line(m))
    for w in workers:
        ctx.emit(None, text=_workers_line(w))
    if workspaces:
        columns = ("workspace", "open", "dirty_files", "dirty_bytes", "pending_deletes", "flush_lag_seconds")
        ctx.emit(workspaces, columns=columns)
    return 0


def _scheduler_line(s: dict) -> str:
    """One process's origin scheduler: limit, what is in flight and queued per class, latency."""

    def per_class(counts: dict) -> str:
        return " ".join(f"{name}={n}" for name, n in counts.items() if n) or "none"

    latency = (
        "-" if s.get("latency_ms") is None else f"{s['latency_ms']:g} ms (base {s['base_latency_ms']:g} ms)"
    )
    return (
        f"origin scheduler of pid {s['pid']}: limit {s['limit']} (flush {s['flush_limit']}), "
        f"in flight {per_class(s['in_flight'])}, queued {per_class(s['queued'])}, latency {latency}, "
        f"backoffs {s['backoffs']}, promoted {s.get('promoted', 0)}"
    )


def _warmup_line(w: dict) -> str:
    """One mount's background warm-up: whether it runs, why, and what it warmed, left and skipped."""
    why = f" ({w['reason']}: {w['scope']})" if w.get("reason") else ""
    return (
        f"warm-up of {w['mount']} [{w['mode']}]: {w['state']}{why}; warmed {counted(w['objects_warmed'], 'object')} "
        f"({_human(w['bytes_warmed'])} fetched), left {w['objects_left']} ({_human(w['bytes_left'])}), "
        f"skipped {w['objects_skipped']} ({_human(w['bytes_skipped'])}) of {w['objects_total']} "
        f"({_human(w['bytes_total'])})"
    )


def _mount_line(m: dict) -> str:
    """One mount's opens and READs: served by the kernel (FUSE passthrough) or by pyfuse3's C
    threads from page files (zero-message opens), or why not, and counts."""
    return (
        f"opens of {m['mountpoint']} [{m['mode']}]: {m['passthrough_opens']} passthrough "
        f"({m.get('passthrough_opens_in_c', 0)} answered in C), "
        f"{m['ordinary_opens']} through the daemon, {counted(m['backing_ids_open'], 'backing file')} held; "
        f"READs in C [{m.get('reads_in_c', 'off')}]: {m.get('reads_answered_in_c', 0)} "
        f"({counted(m.get('page_files_published', 0), 'page file')} held); "
        f"requests from {m.get('requests', '/dev/fuse')}"
    )


def _workers_line(w: dict) -> str:
    """One daemon's fetch worker processes (cache.fetch_workers) and the cold pages they fetched."""
    return (
        f"fetch workers of pid {w['pid']}: {w['running']} running of {w['configured']}, "
        f"{counted(w['fetches'], 'page')} ({_human(w['bytes'])}) fetched, {w['failovers']} failed over to the daemon, "
        f"{counted(w['restarts'], 'restart')}"
    )
