"""tests/torch's tests leave no DataLoader worker running (tests/loader_workers.py says why)."""

from tests.loader_workers import no_worker_outlives_its_test  # noqa: F401 - autouse
