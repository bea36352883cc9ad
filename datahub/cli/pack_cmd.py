"""``datahub pack`` (plan + local workers + commit) and ``datahub pack-worker`` (join a job)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from datahub.console.context import CliContext, author_or_default, shown
from datahub.console.numbers import at_least, positive_seconds

if TYPE_CHECKING:  # the pack engine (PIL, lmdb, worker processes) is imported when a pack runs
    from datahub.pack import PackSpec
    from datahub.pack.job import PackResult


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pack",
        help="resize/re-encode a version's images into LMDB shards and commit them as a new version",
        description="Pack SRC@REF into a new version of DST. Rerunning the same command resumes the job.",
    )
    p.add_argument(
        "source", metavar="SRC@REF", help="source dataset and version, e.g. imagenet@v3 (default latest)"
    )
    p.add_argument(
        "--to", dest="target", required=True, metavar="DST", help="dataset receiving the packed version"
    )
    p.add_argument("--resize", default="", help="shorter=N (shorter side, never enlarges) or WxH")
    p.add_argument(
        "--crop", choices=["center"], default="", help="with --resize WxH: cover the box, cut the centre"
    )
    p.add_argument("--rotate", default="exif", choices=["exif", "none", "90", "180", "270"],
                   help="apply EXIF orientation (default), none, or turn counter-clockwise")  # fmt: skip
    p.add_argument("--format", default="jpeg", choices=["jpeg", "webp"], help="output encoding")
    p.add_argument("--quality", type=int, default=90, help="encoder quality 1-100 (default 90)")
    p.add_argument("--shard-size", default="256MiB", help="source bytes per shard/task (default 256MiB)")
    p.add_argument("--workers", type=at_least(0), default=min(4, len(os.sched_getaffinity(0))),
                   help="local worker processes (0 = in this process)")  # fmt: skip
    p.add_argument("--non-image", choices=["copy", "skip"], default="",
                   help="what to do with non-image records (required if the source has any)")  # fmt: skip
    p.add_argument("--on-corrupt", choices=["skip", "fail"], default="skip",
                   help="a corrupt image is reported by key and skipped (default) or fails the job")  # fmt: skip
    p.add_argument("--max-pixels", type=int, default=None, help="decompression-bomb limit per image")
    p.add_argument(
        "--lease", type=positive_seconds, default=60.0, help="task lease in seconds (renewed while working)"
    )
    p.add_argument("--restart", action="store_true",
                   help="pack every task again instead of resuming the job (its done tasks are dropped)")  # fmt: skip
    p.add_argument("--plan-only", action="store_true",
                   help="create the job and print its id; run it with `datahub pack-worker --job ID`")  # fmt: skip
    p.add_argument("--author", default=None, help="author of the packed version (default: the current user)")
    p.set_defaults(func=run_pack)

    w = sub.add_parser("pack-worker", help="work on a pack job's tasks (any number, on any machine)")
    w.add_argument("--job", required=True, help="job id printed by `datahub pack --plan-only`")
    w.add_argument(
        "--lease", type=positive_seconds, default=60.0, help="task lease in seconds (renewed while working)"
    )
    w.add_argument("--no-commit", action="store_true", help="do not commit the version when the job is done")
    w.add_argument("--author", default=None, help="author of the packed version (default: the current user)")
    w.set_defaults(func=run_worker)


def _spec(args: argparse.Namespace) -> PackSpec:
    from datahub.pack import PackSpec

    extra = {"max_pixels": args.max_pixels} if args.max_pixels else {}
    return PackSpec.parse(resize=args.resize, crop=args.crop, rotate=args.rotate, format=args.format,
                          quality=args.quality, shard_size=args.shard_size, non_image=args.non_image,
                          on_corrupt=args.on_corrupt, **extra)  # fmt: skip


def run_pack(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.pack import pack, start_job
    from datahub.tasks import open_task_queue

    spec = _spec(args)
    if args.plan_only:
        queue = open_task_queue(ctx.config.resolved_catalog_url)
        try:
            job = start_job(ctx.catalog, queue, args.source, args.target, spec, restart=args.restart)
        finally:
            queue.close()
        ctx.emit({"job": job.job, "tasks": job.total, "counts": dict(job.counts)})
        return 0
    progress = ctx.progress(None, "pack shards")

    def on_progress(done: int, total: int) -> None:
        progress.total = total
        progress.update(done - progress.done)

    with progress:
        result = pack(ctx.config, ctx.catalog, args.source, args.target, spec, workers=args.workers,
                      lease_seconds=args.lease, author=author_or_default(args.author), on_progress=on_progress,
                      restart=args.restart)  # fmt: skip
    _emit(ctx, result)
    return 0


def run_worker(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.pack import PackServices, finalize, work
    from datahub.pack.job import failure, job_state

    ctx.existing_catalog_url()  # a worker on a mistyped home: exit 3, no new empty catalog, cache or scratch
    services = PackServices.open(ctx.config)
    try:
        report = work(services, args.job, lease_seconds=args.lease)
        ctx.emit({"worker": report.worker, "done": report.done, "lost": report.lost}, text=None)
        error = failure(services.queue, args.job)
        if error is not None:
            raise error
        state = job_state(services.queue, args.job)
        if state.done and not args.no_commit:
            author = author_or_default(args.author)
            result = finalize(
                ctx.catalog, services.queue, services.objects, args.job, stores=services.stores, author=author
            )
            _emit(ctx, result)
    finally:
        services.close()
    return 0


def _emit(ctx: CliContext, result: PackResult) -> None:
    v = result.version
    ctx.emit({"job": result.job, "version": f"{v.dataset}@v{v.seq}", "shards": result.shards,
              "samples": result.samples, "copied": result.copied, "skipped": len(result.skipped)})  # fmt: skip
    for item in result.skipped:
        print(f"skipped {shown(item['key'])}: {shown(str(item['error']))}", file=ctx.err)
