"""audit15: a job whose existing target the caller may not read is a missing job on every route.

Reading such a job answered as a missing job (review14's rule: its name, source and target
stay unknown), but the worker's routes (claim, renew, complete, fail, release) answered the
target's own 404, ``dataset 'pets-small' not found``: a reader of the source learned that the
job exists and the name of a dataset hidden from it.
"""

from __future__ import annotations

from tests.api.conftest import Api
from tests.api.test_task_access import JOB, _start, _worker_calls


def test_a_hidden_target_is_never_named_by_the_workers_routes(api: Api) -> None:
    api.catalog.create_dataset("pets-small", owner="owner")  # alice reads pets, not pets-small
    _start(api)
    missing = api.get("/v1/tasks/jobs/pack-none", "alice").json()["error"]
    for call, answer in _worker_calls(api, "alice").items():
        assert answer.status_code == 404, (call, answer.text)
        assert answer.json()["error"]["code"] == "job_not_found", (call, answer.text)
        assert answer.json()["error"]["message"] == missing["message"].replace("pack-none", JOB), call
        assert "pets-small" not in answer.text, call
    assert api.get(f"/v1/tasks/jobs/{JOB}").json()["counts"] == {"TODO": 2}
