"""The end-to-end example runs as documented: import, pack, one training epoch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_packed.py"


@pytest.mark.slow
def test_example_imports_packs_and_trains(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--home", str(tmp_path), "--images", "64", "--batch-size", "16"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "imported 64 photos as photos@v1" in out.stdout
    assert "packed 64 samples" in out.stdout and "as photos-64@v1" in out.stdout
    assert "trained 1 epoch: 64 images in 4 batches" in out.stdout
    assert "images/s, data_time" in out.stdout
