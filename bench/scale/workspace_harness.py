"""What ``workspace_open.py`` and ``workspace_flush.py`` share: one workspace of N small files
built once and measured by each side in turn.

recover20: the two benchmarks each had a copy of this (the duplicates tool's near-copy). A
workspace of N files of ~70 bytes, 1,000 to a directory, is built once by the base tree's
writers (``workspace_flush.py --prepare``: 8 threads through the ``Workspace`` API, left as a
crash leaves it, nothing flushed) and kept aside (``--reuse``: kept for the next run, and
used if there). Each side, in turn (the order alternating between sizes), gets a fresh copy
at the same path (the journal names its shared tier and target by path) and runs its step in
a process of its own, with its own ``datahub`` (``PYTHONPATH``: that tree), the benchmark's
file being this tree's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
try:
    from bench.scale.workspace_commit import (
        _AnonPeak,
        _config,
        _content,
        _load,
        _path,
        _reset_peak,
        _status_mib,
    )
except ImportError:  # a child on a base tree without this module, run from this directory
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from workspace_commit import _AnonPeak, _config, _content, _load, _path, _reset_peak, _status_mib  # noqa: F401

FLUSH_BENCH = Path(__file__).resolve().with_name("workspace_flush.py")


def child(script: Path, tree: Path, *args: str, strace: Path | None = None) -> dict:
    """Run ``script`` (this tree's) with ``tree``'s ``datahub``; the JSON of its last line.
    ``strace``: under ``strace -ff`` writing there (``workspace_flush.py --disk --strace``)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-P", str(script), *args]
    if strace is not None:
        calls = "write,pwrite64,pwritev,pwritev2,writev,fsync,fdatasync,sync_file_range,msync"
        cmd = ["strace", "-ff", "-qq", "-y", "-s", "0", "-e", f"trace={calls}", "-o", str(strace), *cmd]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "datahub" in result:
        if Path(result["datahub"]) != tree / "datahub":
            raise SystemExit(f"the child in {tree} imported datahub from {result['datahub']}")
        result["datahub"] = "its own tree"
    return result


def trees_of(base_tree: str | None) -> dict[str, Path]:
    """ "head" (this tree) and, if given, "base"."""
    return {"head": HEAD} | ({"base": Path(base_tree).resolve()} if base_tree else {})


def order(trees: dict[str, Path], k: int) -> list[str]:
    """The sides in turn for the ``k``-th size: alternating, so neither always goes first."""
    return list(trees) if k % 2 == 0 else list(reversed(trees))


SCRATCH = "/var/tmp/workspace-bench"  # the default of ``--scratch``: a directory of its own


def home_of(scratch: str, n: int) -> Path:
    """Where a workspace of ``n`` files is opened (every copy at the same path: the journal
    names its shared tier and flush target by path), beside its kept copy."""
    Path(scratch).mkdir(parents=True, exist_ok=True)
    return Path(scratch) / f"bench-{n}"


def built(
    scratch: str,
    n: int,
    builder: Path,
    reuse: bool,
    variant: str = "",
    derive: Callable[[Path], dict] | None = None,
) -> Path:
    """The kept copy of the workspace of ``n`` files (built now unless ``reuse`` finds one).
    ``variant``/``derive``: a workspace made from that one by ``derive(home)`` (run on a fresh
    copy at the workspace's path), kept beside it under its own name."""
    home = home_of(scratch, n)
    pristine = Path(f"{home}{'-' + variant if variant else ''}-built")
    if reuse and pristine.is_dir():
        print(f"{n} files{' ' + variant if variant else ''}, built before (--reuse): "
              f"{json.loads((pristine / 'built.json').read_text())}", flush=True)  # fmt: skip
        return pristine
    shutil.rmtree(pristine, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    if variant:
        assert derive is not None
        source = built(scratch, n, builder, reuse)
        shutil.copytree(source, home, symlinks=True)
        print(f"{n} files, {variant} (base tree): {_load()}", flush=True)
        made = derive(home)
    else:
        print(f"{n} files, build (base tree's writers): {_load()}", flush=True)
        made = child(FLUSH_BENCH, builder, "--prepare", str(home), "--files", str(n))
    print(f"  {json.dumps(made)}", flush=True)
    (home / "built.json").write_text(json.dumps(made))
    os.rename(home, pristine)
    return pristine


def each_side(trees: dict[str, Path], k: int, pristine: Path, home: Path) -> Iterator[tuple[str, Path]]:
    """(side, its tree) in turn, a fresh copy of ``pristine`` at ``home`` for each, removed after."""
    for name in order(trees, k):
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(pristine, home, symlinks=True)
        try:
            yield name, trees[name]
        finally:
            shutil.rmtree(home, ignore_errors=True)
