"""newuser36: LabelX's words for a class list that names no class or one twice, and for an
export format the project's kind has no use for.

``create-project --classes ,`` said "a label schema needs 1 to 64 classes" of a flag given;
``--classes cat,dog,cat`` "class names must be unique", naming none; ``export P --format
yolo`` of a classification project "YOLO export is for detection projects; use CSV for
classification", naming neither the project nor its kind.
"""

from __future__ import annotations

import pytest

from datahub.cli.main import main
from tests.labelx.conftest import Env, Session, make_project


@pytest.mark.parametrize(
    ("classes", "said"),
    [
        (
            ",",
            "error: --classes ',' names no class: give the class names, comma-separated (--classes cat,dog)",
        ),
        ("cat,dog,cat", "error: class names must be unique: 'cat' given more than once"),
    ],
)
def test_create_project_names_what_is_wrong_with_its_classes(
    app, env: Env, tmp_path, capsys, classes: str, said: str
) -> None:
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    args = ["labelx", "create-project", "p", "--dataset", "pets", "--classes", classes, "--user", "admin"]
    assert main([*home, *args]) == 2
    assert capsys.readouterr().err == said + "\n"


@pytest.mark.parametrize("fmt", ["coco", "yolo"])
def test_a_detection_format_of_a_classification_project_names_it(app, env: Env, fmt: str) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    refused = admin.get(f"/api/projects/{pid}/export/{fmt}")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["message"] == (
        f"project 'pets-cls' is a classification project: {fmt.upper()} export is for detection "
        "projects; export it as CSV"
    )
