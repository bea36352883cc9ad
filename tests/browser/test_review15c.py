"""review15c: newuser15's error pages under a dataset's address (a link back to the dataset,
the dataset in the breadcrumbs) must not tell a caller who may not read a dataset that it
exists: for each malformed address (a filter, a diff, a cursor, a version, a record), the
page carol (who reads nothing) gets under alice's ``pets`` is the page she gets under a name
that does not exist, but for the name itself; alice, who reads it, gets the link back.
All held on main (newuser15's check: not for ``dataset_not_found``, 401 or 403)."""

from __future__ import annotations

from tests.browser.test_access import auth_app, auth_env, signed_in, token  # noqa: F401 - fixtures

TYPOS = (
    "/datasets/{d}/versions/9",
    "/datasets/{d}/versions/v9x",
    "/datasets/{d}/versions/1?filter=labels.class%3D%3D%3D((",
    "/datasets/{d}/versions/1?cursor=not-a-cursor",
    "/datasets/{d}/versions/1/records/nope.jpg",
    "/datasets/{d}/diff?from=x&to=2",
    "/datasets/{d}/diff?from=1&to=99",
    "/datasets/{d}/versions/1/charts/sizes.svg?filter=((",
)


def test_an_unreadable_datasets_error_pages_are_a_missing_ones(auth_app, auth_env) -> None:  # noqa: F811
    carol = signed_in(auth_app, token(auth_env, "carol"))
    alice = signed_in(auth_app, token(auth_env, "alice"))
    for template in TYPOS:
        hidden = carol.get(template.format(d="pets"))
        missing = carol.get(template.format(d="pats"))
        assert (hidden.status_code, hidden.text.replace("pets", "pats")) == (
            missing.status_code,
            missing.text,
        ), (
            template,
            hidden.status_code,
            missing.status_code,
        )
        assert "Back to pets" not in hidden.text, template
        seen = alice.get(template.format(d="pets"))  # who reads it: the typo's page links back
        # a filter that does not parse keeps the version's own page, the error under its filter
        # box (newuser72): it was an error page linking back
        shows = 'id="filter-error"' if "versions/1?filter=" in template else "Back to pets"
        assert seen.status_code in (400, 404) and shows in seen.text, (template, seen.status_code)
