"""review15a: the task routes' 404 for a job the caller may not see (audit15), byte for byte.

audit15 made every worker route answer a job whose target is hidden from the caller with the
missing job's message; this compares the whole answer (status, body, every header) of each
route with the same call on a job that does not exist, for a reader of the source whose
target is hidden (alice) and for a token with no role at all (eve)."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api
from tests.api.test_task_access import FORGED, JOB, _start

MISSING = "pack-t9"  # as long as JOB, so Content-Length compares too


def _calls(api: Api, who: str, job: str) -> dict[str, object]:
    base = f"/v1/tasks/jobs/{job}"
    lease = {"lease": f"{who}/1"}
    return {
        "get": api.get(base, who),
        "tasks": api.get(f"{base}/tasks", who),
        "claim": api.post(f"{base}/claim", who, json={"worker": f"{who}/1", "lease_seconds": 60}),
        "renew": api.post(f"{base}/tasks/0/renew", who, json={**lease, "lease_seconds": 60}),
        "complete": api.post(f"{base}/tasks/0/complete", who, json={**lease, "result": FORGED}),
        "fail": api.post(f"{base}/tasks/1/fail", who, json={**lease, "error": "no"}),
        "release": api.post(f"{base}/tasks/0/release", who, json=lease),
    }


@pytest.mark.parametrize("who", ["alice", "eve"])
def test_a_job_hidden_from_the_caller_answers_as_a_missing_one_byte_for_byte(api: Api, who: str) -> None:
    api.catalog.create_dataset("pets-small", owner="owner")  # alice reads pets, not pets-small
    _start(api)
    hidden, missing = _calls(api, who, JOB), _calls(api, who, MISSING)
    for call, answer in hidden.items():
        other = missing[call]
        assert answer.status_code == other.status_code == 404, (call, answer.text, other.text)
        assert answer.content.replace(JOB.encode(), MISSING.encode()) == other.content, call
        assert sorted(answer.headers.items()) == sorted(other.headers.items()), call
    assert api.get(f"/v1/tasks/jobs/{JOB}").json()["counts"] == {"TODO": 2}
