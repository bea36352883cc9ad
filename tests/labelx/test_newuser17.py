"""What a new user met in LabelX (newuser17): the login form forgot the user name typed after a
wrong password (or an expired form), and an error page showed a command's backticks as text."""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient

from datahub.cli.main import main
from labelx.pages import PAGES
from tests.labelx.conftest import PASSWORD, SCHEMA, Session


def _name_field(page: str) -> str:
    """The login form's user-name input, as the page has it."""
    return re.search(r'<input name="name"[^>]*>', page)[0]


def _refused(client: TestClient, name: str, password: str, csrf: str | None = None) -> str:
    token = client.get("/login").cookies.get(client.app.state.labelx.auth.login_csrf_cookie)
    form = {"name": name, "password": password, "csrf": csrf or token}
    resp = client.post("/login", data=form, follow_redirects=False)
    assert resp.status_code == 303 and "labelx_session" not in resp.cookies
    return resp.headers["location"]


def test_the_form_after_a_wrong_password_has_the_name_typed_and_the_url_has_not(app) -> None:
    client = TestClient(app, base_url="http://127.0.0.1")
    where = _refused(client, "alice", "not the password")
    assert where == "/login?error=wrong"  # the name stays out of the URL (access logs, history)
    field = _name_field(client.get(where).text)
    assert 'value="alice"' in field and "autofocus" not in field  # the password field has it

    # a success forgets it: the next person at this browser finds an empty form
    token = client.get("/login").cookies.get(app.state.labelx.auth.login_csrf_cookie)
    resp = client.post(
        "/login", data={"name": "alice", "password": PASSWORD, "csrf": token}, follow_redirects=False
    )
    assert resp.headers["location"] == "/" and app.state.labelx.auth.login_name_cookie not in client.cookies
    assert 'value=""' in _name_field(client.get("/login?error=wrong").text)


def test_an_expired_form_keeps_the_name_too_and_a_plain_visit_shows_none(app) -> None:
    client = TestClient(app, base_url="http://127.0.0.1")
    assert _refused(client, "rita", PASSWORD, csrf="forged") == "/login?error=expired"
    assert 'value="rita"' in _name_field(client.get("/login?error=expired").text)
    assert 'value=""' in _name_field(client.get("/login").text)  # not a refusal: nothing kept


def test_the_name_kept_comes_back_escaped_and_as_typed(app) -> None:
    client = TestClient(app, base_url="http://127.0.0.1")
    typed = '"><script>alert(1)</script> é\u202e;x'
    _refused(client, typed, "nope")
    field = _name_field(client.get("/login?error=wrong").text)
    assert "<script>" not in field
    value = re.search(r'value="([^"]*)"', field)[1]
    assert html.unescape(value) == typed  # sent again as it is, not with ⟨U+202E⟩ for its mark


def _error_page(message: str) -> str:
    """LabelX's error page for ``message``, as ``pages.error_page`` renders it."""
    return PAGES.render(
        "error.html",
        base="/labelx",
        page="error",
        boot=None,
        scripts=[],
        stylesheets=[],
        favicon="",
        title="404 not_found",
        code="not_found",
        message=message,
    )


def test_an_error_page_shows_a_command_as_code_not_backticks() -> None:
    page = _error_page("no project named '<b>x</b>'; list them with `datahub labelx projects`")
    said = re.search(r'<p class="error-message"[^>]*>(.*?)</p>', page)[1]
    assert said == (
        "no project named &#39;&lt;b&gt;x&lt;/b&gt;&#39;; list them with <code>datahub labelx projects</code>"
    )
    assert "a lone ` stays</p>" in _error_page("a lone ` stays")


def test_a_version_neither_number_nor_tag_is_refused_with_the_rule_in_words(app) -> None:
    """The home page's Version field (``latest, 3 or a tag``) with ``bad!`` answered "invalid
    request: version.function-before[whole_number(), constrained-int]: Input should be a valid
    integer": the first of the union's two refusals, at the name of pydantic's branch."""
    admin = Session(app, "admin")
    body = {"name": "p", "dataset": "pets", "schema": {"kind": "classification", "classes": ["cat"]}}
    r = admin.post("/api/projects", body | {"version": "bad!"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == (
        "invalid request: version: 'bad!': use a version number (3 or v3), latest, or a tag"
    )
    r = admin.post("/api/projects", body | {"version": 1.5})  # neither branch's kind: at the field
    assert r.json()["error"]["message"] == "invalid request: version: Input should be a valid integer"
    # two fields each refused by their pattern stay two fields: the first is reported, as before
    r = admin.post("/api/projects", body | {"name": "Bad Name", "dataset": "Bad Name"})
    assert r.json()["error"]["message"].startswith("invalid request: name: 'Bad Name': use 1-63")


def test_labelx_export_to_a_missing_directory_says_so(app, env, tmp_path, capsys, monkeypatch) -> None:
    """``datahub labelx export P --format csv -o missing/dir/x.csv`` said "this is a datahub
    bug" (the FileNotFoundError of ``x.csv.partial``)."""
    cat = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
    assert main([*cat, "labelx", "create-user", "zoe", "--role", "admin"]) == 0
    made = [*cat, "labelx", "create-project", "p", "--dataset", "pets", "--classes", "cat", "--user", "zoe"]
    assert main(made) == 0
    capsys.readouterr()
    target = tmp_path / "missing" / "labels.csv"
    assert main([*cat, "labelx", "export", "p", "--format", "csv", "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"error: -o {target}: directory {target.parent} does not exist; create it first or write elsewhere\n"
    )
    target.parent.mkdir()
    assert main([*cat, "labelx", "export", "p", "--format", "csv", "-o", str(target)]) == 0
    assert target.read_text().startswith("key,")


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--side", "0", "invalid --side 0: use 1..4096 pixels (the model's input, e.g. 224)"),
        ("--side", "-4", "invalid --side -4: use 1..4096 pixels (the model's input, e.g. 224)"),
        ("--side", "100000", "invalid --side 100000: use 1..4096 pixels (the model's input, e.g. 224)"),
        ("--batch-size", "0", "invalid --batch-size 0: use 1..4096 images (e.g. 16)"),
    ],
)
def test_preannotate_refuses_a_side_or_batch_no_model_can_take(app, env, tmp_path, capsys, flag, value, said):
    """``--side 0`` ended in "ValueError: height and width must be > 0; this is a datahub bug";
    ``--side 100000`` set out to build a 120 GB input; ``--batch-size 0`` ran as 1, unsaid."""
    store = app.state.labelx.store
    project = app.state.labelx.service.create_project(
        store.user_by_name("admin"), name="by-model", dataset="pets", schema=SCHEMA, task_size=12
    )
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    run = [*home, "labelx", "preannotate", "by-model", "--model", "tests.labelx.models:by_color", flag, value]
    assert main(run) == 2
    assert capsys.readouterr().err.endswith(f"error: {said}\n")
    assert all(i.suggestion is None for i in store.iter_items(project.id))  # nothing stored


def test_create_project_given_a_version_for_its_dataset_says_where_the_version_goes(
    app, env, tmp_path, capsys
) -> None:
    """``--dataset pets@v1`` said only "invalid dataset name 'pets@v1'", as if the name were wrong."""
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    made = [*home, "labelx", "create-project", "p", "--classes", "cat", "--user", "admin", "--dataset"]
    assert main([*made, "pets@v1"]) == 2
    assert capsys.readouterr().err == (
        "error: --dataset takes a dataset's name, not a version ('pets@v1'); "
        "the version goes in --version: `--dataset pets --version v1`\n"
    )
    assert app.state.labelx.store.list_projects() == []  # nothing made
    assert main([*made, "pets", "--version", "v1"]) == 0
