"""Collecting a test module runs no test's work: every pytest-xdist worker imports every test
module, and ``--dist loadfile`` then runs it on one of them, so what a module computes at its
top is paid once per worker (twice in ``make test``) for a test run once.

suite36 found two such modules in a profile of the collection: ``tests/test_collect21_lazy_torch.py``
parsed every test module that says torch (0.8 CPU-s a worker) and ``tests/pack/test_image.py``
made two 1200x900 blurred photos (0.25 CPU-s a worker). Both now do it in their tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# imports MODULES as a collection does, counting the work each test now does in its own body
PROBE = """
import ast, importlib, json, sys
import datahub.pack.image as image

counts = {"ast.parse": 0, "synthetic_photo": 0}
parse, photo = ast.parse, image.synthetic_photo

def counted_parse(*args, **kwargs):
    counts["ast.parse"] += 1
    return parse(*args, **kwargs)

def counted_photo(*args, **kwargs):
    counts["synthetic_photo"] += 1
    return photo(*args, **kwargs)

ast.parse, image.synthetic_photo = counted_parse, counted_photo
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(counts))
"""


def test_collecting_these_modules_parses_no_file_and_draws_no_photo() -> None:
    modules = ("tests.test_collect21_lazy_torch", "tests.pack.test_image")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ast.parse": 0, "synthetic_photo": 0}
