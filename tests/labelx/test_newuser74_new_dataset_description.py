"""A LabelX commit into a new dataset, from a source with no description (as ``make run``'s
``sample``): the new dataset was described "(labels from LabelX project P)", a parenthesis of
nothing on the datasets list and its page (newuser74). It now reads "labels from LabelX project
P"; a source with a description keeps "DESCRIPTION (labels from LabelX project P)"."""

from __future__ import annotations

from tests.labelx.conftest import Session, ok
from tests.labelx.test_newuser33 import _accept_all


def test_a_source_with_no_description_gives_a_plain_one(app, env) -> None:
    env.catalog.update_dataset("pets", description="")
    pid = _accept_all(app, env)
    v = ok(Session(app, "admin").post(f"/api/projects/{pid}/commit", {"to_dataset": "pets-relabelled"}))
    assert (v["dataset"], v["seq"]) == ("pets-relabelled", 1)
    assert env.catalog.get_dataset("pets-relabelled").description == "labels from LabelX project pets-cls"
