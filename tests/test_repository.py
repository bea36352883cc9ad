"""The repository stands on its own: a clone is all a user has.

Tests, benchmarks and scripts must not reach outside the checkout (no sibling folders such as
``../shared``) and must not name paths of the machine they were written on.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "var", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "build"}
TEXT_SUFFIXES = {
    ".py",
    ".sh",
    ".md",
    ".toml",
    ".yaml",
    ".yml",
    ".txt",
    ".cfg",
    ".ini",
    ".json",
    ".html",
    ".js",
    "",
}
# Absolute paths of a particular machine, and folders beside the checkout.
FORBIDDEN = re.compile(
    r"(?<![\w.])/work/|(?<![\w.])/home/[a-z]|\.\./shared\b|DATAHUB_SHARED|\bshared/(tools|bench|seeds|design)\b"
)
# Where a path like these is the subject of the text, not a dependency. pyfuse3's sdist
# (third_party/pyfuse3, kept byte for byte) ships a notebook's output that names its author's
# machine: upstream's text, not a path anything here uses.
ALLOWED = {
    Path("tests/test_repository.py"),
    Path("third_party/pyfuse3/developer-notes/FUSEError Performance.html"),
}


def _repo_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        names = [Path(n) for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # a tarball, not a clone
        names = [
            p.relative_to(REPO)
            for p in REPO.rglob("*")
            if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(REPO).parts)
        ]
    return [n for n in names if n.suffix in TEXT_SUFFIXES and (REPO / n).is_file()]


def test_no_file_names_a_path_outside_the_checkout() -> None:
    offenders = []
    for rel in _repo_files():
        if rel in ALLOWED:
            continue
        text = (REPO / rel).read_text(errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append(f"{rel}:{lineno}: {line.strip()[:120]}")
    assert not offenders, "paths outside the checkout or of one machine:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "path", ["scripts/ceph-dev/ceph-up.sh", "scripts/ceph-dev/ceph-down.sh", "bench/peers/run_bench.py"]
)
def test_the_tools_tests_and_benchmarks_need_are_in_the_repository(path: str) -> None:
    assert (REPO / path).is_file(), f"{path} must be part of the repository"


def test_the_forbidden_pattern_catches_what_it_should() -> None:
    """The grep above is only worth something if it would fire."""
    for bad in ("PEERS=/work/shared/bench/peers", 'Path("../shared/tools/ceph")', "export DATAHUB_SHARED=x"):
        assert FORBIDDEN.search(bad), bad
    for fine in ("the shared tier", "cache.shared_url", "/var/tmp/peers-bench", "s3://bucket/work/x"):
        assert not FORBIDDEN.search(fine), fine
