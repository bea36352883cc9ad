"""Who may work a task-queue job over /v1/tasks/jobs (the pack workers' routes).

A pack job's results become the records of its target dataset (``datahub.pack.job.finalize``
commits the shard URLs the workers reported), and its payloads and meta describe its
source. So working a job is reading the source and writing the target: a token with no role
on the source must see the job as missing, and one that may not write an existing target
must not complete, fail or release its tasks (nor anyone but an admin while the target
does not exist yet).
"""

from __future__ import annotations

from tests.api.conftest import Api

JOB = "pack-t1"
META = {"kind": "pack", "source": "pets", "seq": 1, "target": "pets-small", "spec": {}}
FORGED = {
    "count": 1,
    "url": "s3://elsewhere/evil.lmdb",
    "etag": "e",
    "size": 1,
    "checksum": "",
    "keys": ["x"],
}


def _start(api: Api) -> None:
    made = api.put(f"/v1/tasks/jobs/{JOB}", json={"payloads": [{"n": 0}, {"n": 1}], "meta": META})
    assert made.status_code == 200, made.text


def _worker_calls(api: Api, who: str) -> dict[str, object]:
    base = f"/v1/tasks/jobs/{JOB}"
    return {
        "get": api.get(base, who),
        "tasks": api.get(f"{base}/tasks", who),
        "claim": api.post(f"{base}/claim", who, json={"worker": f"{who}/1", "lease_seconds": 60}),
        "renew": api.post(f"{base}/tasks/0/renew", who, json={"lease": f"{who}/1", "lease_seconds": 60}),
        "complete": api.post(f"{base}/tasks/0/complete", who, json={"lease": f"{who}/1", "result": FORGED}),
        "fail": api.post(f"{base}/tasks/1/fail", who, json={"lease": f"{who}/1", "error": "no"}),
        "release": api.post(f"{base}/tasks/0/release", who, json={"lease": f"{who}/1"}),
    }


def test_a_token_with_no_role_on_the_source_sees_no_job_and_cannot_forge_its_results(api: Api) -> None:
    _start(api)
    missing = api.get("/v1/tasks/jobs/pack-none", "eve")
    assert missing.status_code == 404
    for call, answer in _worker_calls(api, "eve").items():
        assert answer.status_code == 404, (call, answer.text)
        assert answer.json()["error"]["code"] == "job_not_found", call
        assert JOB in answer.json()["error"]["message"]
        assert "pets" not in answer.text, call  # neither the source nor the target is named
    job = api.get(f"/v1/tasks/jobs/{JOB}").json()
    assert job["counts"] == {"TODO": 2}  # nothing claimed, completed or failed
    tasks = [line for line in api.get(f"/v1/tasks/jobs/{JOB}/tasks").text.splitlines() if '"index"' in line]
    assert all('"owner":""' in line and "evil" not in line for line in tasks)


def test_a_target_not_made_yet_is_worked_by_admins_only(api: Api) -> None:
    """No role on a missing target can be checked, and a reader of the source (often every
    caller, '*') must not write its first version: until it exists, only admins work the job."""
    _start(api)
    base = f"/v1/tasks/jobs/{JOB}"
    assert api.get(base, "alice").status_code == 200  # reading the job is reading the source
    claimed = api.post(f"{base}/claim", "alice", json={"worker": "alice/1", "lease_seconds": 60})
    assert claimed.status_code == 403, claimed.text
    message = claimed.json()["error"]["message"]
    assert "'pets-small', which does not exist yet" in message
    assert "datahub dataset update pets-small --grant alice=writer" in message
    assert api.get(base).json()["counts"] == {"TODO": 2}
    claimed = api.post(f"{base}/claim", json={"worker": "root/1", "lease_seconds": 60})
    assert claimed.status_code == 200 and claimed.json()["task"]["index"] == 0
    lease = claimed.json()["task"]["lease"]
    done = api.post(f"{base}/tasks/0/complete", json={"lease": lease, "result": {"count": 0}})
    assert done.status_code == 200 and done.json()["state"] == "DONE"


def test_an_existing_target_needs_the_writer_role(api: Api) -> None:
    api.catalog.create_dataset("pets-small", owner="owner", acl={"alice": "reader", "bob": "writer"})
    _start(api)
    base = f"/v1/tasks/jobs/{JOB}"
    answers = _worker_calls(api, "alice")  # reads both datasets, writes neither
    assert answers["get"].status_code == 200  # reading the job is reading the source
    assert answers["tasks"].status_code == 200
    for call in ("claim", "renew", "complete", "fail", "release"):
        answer = answers[call]
        assert answer.status_code == 403, (call, answer.text)
        assert answer.json()["error"]["code"] == "access_denied"
        assert (
            "writer" in answer.json()["error"]["message"]
            and "pets-small" in answer.json()["error"]["message"]
        )
    assert api.get(base).json()["counts"] == {"TODO": 2}
    claimed = api.post(f"{base}/claim", "bob", json={"worker": "bob/1", "lease_seconds": 60})
    assert claimed.status_code == 200 and claimed.json()["task"]["index"] == 0
    lease = claimed.json()["task"]["lease"]
    done = api.post(f"{base}/tasks/0/complete", "bob", json={"lease": lease, "result": {"count": 0}})
    assert done.status_code == 200 and done.json()["state"] == "DONE"


def test_a_target_the_worker_cannot_read_answers_as_a_missing_job(api: Api) -> None:
    """As reading the job: a job whose target the caller may not read is the missing job's 404
    (it was the target's own 404, which named it: tests/api/test_audit15.py)."""
    api.catalog.create_dataset("pets-small", owner="owner")
    _start(api)
    claimed = api.post(
        f"/v1/tasks/jobs/{JOB}/claim", "alice", json={"worker": "alice/1", "lease_seconds": 60}
    )
    assert claimed.status_code == 404, claimed.text
    assert claimed.json()["error"]["code"] == "job_not_found" and "pets-small" not in claimed.text
    assert api.get(f"/v1/tasks/jobs/{JOB}").json()["counts"] == {"TODO": 2}


def test_a_job_whose_target_the_caller_may_not_read_answers_as_a_missing_job(api: Api) -> None:
    """Reading a job is reading its meta (which names the target) and its tasks' results (the
    target's shard URLs and keys): a reader of the source who may not read an existing target
    got both, while the target itself answers that caller as a missing dataset."""
    api.catalog.create_dataset("pets-small", owner="owner")  # alice reads pets, not pets-small
    _start(api)
    lease = api.post(f"/v1/tasks/jobs/{JOB}/claim", json={"worker": "root/1", "lease_seconds": 60})
    api.post(
        f"/v1/tasks/jobs/{JOB}/tasks/0/complete",
        json={"lease": lease.json()["task"]["lease"], "result": FORGED},
    )
    for path in (f"/v1/tasks/jobs/{JOB}", f"/v1/tasks/jobs/{JOB}/tasks"):
        answer = api.get(path, "alice")
        assert answer.status_code == 404, answer.text
        missing = api.get("/v1/tasks/jobs/pack-none", "alice").json()["error"]
        assert answer.json()["error"]["code"] == "job_not_found"
        assert answer.json()["error"]["message"] == missing["message"].replace("pack-none", JOB)
        assert "pets-small" not in answer.text and "evil" not in answer.text
    assert api.get(f"/v1/tasks/jobs/{JOB}", "bob").status_code == 404  # bob: no role on pets-small either
    api.catalog.update_dataset("pets-small", acl={"alice": "reader"})
    assert api.get(f"/v1/tasks/jobs/{JOB}", "alice").status_code == 200


def test_a_job_naming_no_source_is_read_and_worked_by_admins_only(api: Api) -> None:
    """sec24: an epoch made by ``shard_epoch`` names no dataset (meta ``{"kind": "epoch"}``), and
    such a job was claimed, completed and listed by any valid token, eve's too, since no role
    could be checked. It is now admins' only, with a 403 saying how to name its source; the
    same epoch with a source is worked by the source's readers (alice), not by eve."""
    epoch = "/v1/tasks/jobs/epoch-7"
    for meta in ({"kind": "epoch"}, {"kind": "epoch", "source": ["pets"]}, {}):
        made = api.put(epoch, json={"payloads": [{"shard": 0}, {"shard": 1}], "meta": meta})
        assert made.status_code == 200, made.text
        for who in ("alice", "eve"):
            answers = {
                "get": api.get(epoch, who),
                "tasks": api.get(f"{epoch}/tasks", who),
                "claim": api.post(f"{epoch}/claim", who, json={"worker": who, "lease_seconds": 60}),
                "complete": api.post(f"{epoch}/tasks/0/complete", who, json={"lease": "x", "result": {}}),
                "release": api.post(f"{epoch}/tasks/0/release", who, json={"lease": "x"}),
            }
            for call, answer in answers.items():
                assert answer.status_code == 403, (meta, who, call, answer.text)
                error = answer.json()["error"]
                assert error["code"] == "access_denied" and error["details"]["job"] == "epoch-7"
                assert "only an admin token" in error["message"], error
                assert "shard_epoch(queue, 'epoch-7', shards, source=DATASET)" in error["message"], error
        assert api.get(epoch).json()["counts"] == {"TODO": 2}
        api.delete(epoch)
    made = api.put(epoch, json={"payloads": [{"shard": 0}], "meta": {"kind": "epoch", "source": "pets"}})
    assert made.status_code == 200, made.text
    assert api.post(f"{epoch}/claim", "eve", json={"worker": "eve", "lease_seconds": 60}).status_code == 404
    claimed = api.post(f"{epoch}/claim", "alice", json={"worker": "alice/1", "lease_seconds": 60})
    assert claimed.status_code == 200 and claimed.json()["task"]["index"] == 0, claimed.text
    lease = claimed.json()["task"]["lease"]
    done = api.post(f"{epoch}/tasks/0/complete", "alice", json={"lease": lease, "result": {"n": 1}})
    assert done.status_code == 200 and done.json()["state"] == "DONE", done.text
