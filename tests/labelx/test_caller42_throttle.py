"""caller42: LabelX's password checks are throttled (docs/labelx.md, "Sign-in throttling").

Before, the login form and ``POST /api/tokens``'s password ("sudo mode") checked every guess
at full speed, for ever. Now failures are counted per account name and per client address in
labelx.db (shared by every worker process), a growing lock-out is answered 429 with
``Retry-After``, the same whether the account exists or not, and a success resets the
account. Over HTTP against the real app; the store's clock is frozen, so a lock never runs
out while a test runs (no test depends on timing).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from labelx.app import create_labelx_app
from tests.labelx.conftest import PASSWORD, Session, ok

NOW = 2_000_000_000.0


@pytest.fixture
def frozen(app):
    app.state.labelx.store.clock = lambda: NOW
    return app


def sign_in(app, name: str, password: str, client: tuple[str, int] = ("10.0.0.1", 5000)):
    """One login through the form, as a browser posts it; the answer, unfollowed."""
    browser = TestClient(app, base_url="http://127.0.0.1", client=client)
    token = re.search(r'name="csrf" value="([^"]+)"', browser.get("/login").text)[1]
    return browser.post(
        "/login", data={"name": name, "password": password, "csrf": token}, follow_redirects=False
    )


def refused_wrong(resp) -> bool:
    return resp.status_code == 303 and "error=wrong" in resp.headers["location"]


def throttled(resp) -> int:
    """The Retry-After of a 429 of the throttle (asserting it is one)."""
    assert resp.status_code == 429, (resp.status_code, resp.headers, resp.text[:300])
    assert 'data-error="throttled"' in resp.text
    assert "labelx_session" not in resp.headers.get("set-cookie", "")
    return int(resp.headers["Retry-After"])


def test_wrong_passwords_lock_the_account_out_even_for_the_right_one(frozen):
    for _ in range(6):  # five free failures; the sixth locks
        assert refused_wrong(sign_in(frozen, "alice", "guess-guess"))
    resp = sign_in(frozen, "alice", PASSWORD)  # right, but unchecked while locked
    assert throttled(resp) >= 1
    retry = re.search(r'data-retry="(\d+)"', resp.text)[1]
    assert retry == resp.headers["Retry-After"]  # the form says how long to wait
    # another address: the account's own count holds it
    throttled(sign_in(frozen, "alice", PASSWORD, client=("10.9.9.9", 1)))


def test_the_lock_grows_and_ends_and_a_success_resets_the_account(frozen):
    store = frozen.state.labelx.store
    for _ in range(6):
        sign_in(frozen, "bob", "nope-nope")
    first = throttled(sign_in(frozen, "bob", "nope-nope"))
    store.clock = lambda: NOW + first  # that lock is over: the next failure locks longer
    assert refused_wrong(sign_in(frozen, "bob", "nope-nope"))
    second = throttled(sign_in(frozen, "bob", PASSWORD))
    assert second > first
    store.clock = lambda: NOW + first + second
    assert sign_in(frozen, "bob", PASSWORD).status_code == 303  # over: the right one opens it
    for _ in range(6):  # the count started again from zero
        assert refused_wrong(sign_in(frozen, "bob", "nope-nope"))


def test_an_unknown_name_is_answered_as_an_account(frozen):
    """No hint whether the account exists: the same answers at the same attempts."""
    answers = {}
    for name in ("alice", "nobody-here"):
        seen = [sign_in(frozen, name, "wrong-wrong", client=(f"10.0.1.{len(answers)}", 1)) for _ in range(7)]
        answers[name] = [(r.status_code, r.headers.get("Retry-After")) for r in seen]
        last = re.sub(r'value="[^"]*"', "", seen[-1].text)  # the fresh CSRF token and the name differ
        answers[name].append(last.replace(name, "NAME"))
    assert answers["alice"] == answers["nobody-here"]


def test_one_address_guessing_many_accounts_is_locked_out(frozen):
    frozen.state.labelx.auth.throttle.address_free = 3
    for name in ("alice", "bob", "rita", "admin"):
        assert refused_wrong(sign_in(frozen, name, "spray-spray"))
    throttled(sign_in(frozen, "admin", PASSWORD))  # this address is locked, whoever signs in
    # another address is not
    assert sign_in(frozen, "admin", PASSWORD, client=("10.0.0.2", 1)).status_code == 303


def test_a_success_gives_the_address_its_attempt_back(frozen):
    """An office behind one NAT address: people signing in never lock it out."""
    frozen.state.labelx.auth.throttle.address_free = 3
    for _ in range(6):
        assert sign_in(frozen, "alice", PASSWORD).status_code == 303
    assert refused_wrong(sign_in(frozen, "bob", "typo-typo"))


def test_parallel_guesses_are_each_counted(frozen):
    """Guesses sent at once all passed a check made before the slow password hash; each is
    counted before its check now, so at most the allowance plus one are checked."""
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: sign_in(frozen, "rita", "wrong-wrong"), range(12)))
    assert sum(map(refused_wrong, answers)) == 6
    assert sum(r.status_code == 429 for r in answers) == 6


def test_the_counts_are_shared_by_every_worker(frozen, env):
    """``datahub serve --workers N``: each worker has its own app over the one labelx.db."""
    other = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    try:
        other.state.labelx.store.clock = lambda: NOW
        for _ in range(6):
            assert refused_wrong(sign_in(frozen, "alice", "guess-guess"))
        throttled(sign_in(other, "alice", PASSWORD))
    finally:
        other.state.labelx.store.close()


def test_the_counts_are_bounded_and_never_flush_out_an_account(frozen):
    throttle = frozen.state.labelx.auth.throttle
    store = frozen.state.labelx.store
    throttle.cap, throttle.address_free = 10, 10**6
    for _ in range(6):
        sign_in(frozen, "alice", "guess-guess")
    for n in range(30):  # names typed at random, from addresses of its choosing
        assert refused_wrong(sign_in(frozen, f"x{n}", "guess-guess", client=(f"10.1.0.{n}", 1)))
    assert store.sign_in_failures("account") <= 10
    assert store.sign_in_failures("address") <= 10
    throttled(sign_in(frozen, "alice", PASSWORD))  # its count is still there


def test_the_token_forms_password_is_throttled_too(frozen):
    """``POST /api/tokens`` from a session checks the password again: a copied session could
    guess it there at full speed."""
    alice = Session(frozen, "alice")
    for _ in range(6):
        resp = alice.post("/api/tokens", {"description": "ci", "password": "guess-guess"})
        assert resp.status_code == 403, resp.text
    resp = alice.post("/api/tokens", {"description": "ci", "password": PASSWORD})
    assert resp.status_code == 429, resp.text
    error = resp.json()["error"]
    assert error["code"] == "too_many_attempts"
    assert int(resp.headers["Retry-After"]) == error["details"]["retry_after"] >= 1
    assert "set-password" in error["message"]


def test_a_right_token_password_resets_the_account(frozen):
    alice = Session(frozen, "alice")
    for _ in range(4):
        alice.post("/api/tokens", {"description": "ci", "password": "guess-guess"})
    ok(alice.post("/api/tokens", {"description": "ci", "password": PASSWORD}), 201)
    for _ in range(5):
        assert refused_wrong(sign_in(frozen, "alice", "guess-guess"))


def test_a_link_cannot_show_the_throttle_message(frozen):
    """``/login?error=throttled`` (a link anyone may send) says nothing: only a 429 does."""
    page = TestClient(frozen, base_url="http://127.0.0.1").get("/login?error=throttled")
    assert page.status_code == 200 and 'data-error=""' in page.text


@pytest.mark.parametrize(
    ("host", "counted"),
    [
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("10.1.2.3", "10.1.2.3"),
        ("testclient", "testclient"),
        (None, "unknown"),
    ],
)
def test_client_addresses_are_counted_by_what_one_client_holds(host, counted):
    from labelx.auth import client_address  # new with the throttle

    assert client_address(host) == counted
