"""caller43: someone guessing an account's password no longer locks its owner out.

caller42's throttle counted failures per account name: six wrong guesses from anywhere locked
the name for every address, the owner's too, for up to 15 minutes at a time, for as long as
the guesser went on. Now (docs/labelx.md, "Sign-in throttling") failures are also counted per
(name, client address); an address the account signed in from in the last 30 days is held to
that pair's count and the address's, never the name's, so the owner at their usual address
signs in while the guesser is locked out. Any other address is still held to the name's
count, so guesses spread over many addresses stay as slow as before, and a guesser on the
owner's own address (one NAT) still gets only the pair's allowance. Over HTTP against the real
app; the store's clock is frozen, so no test depends on timing.
"""

from __future__ import annotations

from tests.labelx.conftest import PASSWORD
from tests.labelx.test_caller42_throttle import NOW, refused_wrong, sign_in, throttled

OWNER = ("10.0.0.7", 5000)  # where alice signs in from
GUESSER = ("10.6.6.6", 5000)


def _frozen(app, at: float = NOW) -> None:
    app.state.labelx.store.clock = lambda: at


def test_a_guesser_elsewhere_does_not_lock_the_owner_out(app):
    _frozen(app)
    assert sign_in(app, "alice", PASSWORD, client=OWNER).status_code == 303  # her usual address
    for _ in range(6):
        assert refused_wrong(sign_in(app, "alice", "guess-guess", client=GUESSER))
    throttled(sign_in(app, "alice", "guess-guess", client=GUESSER))  # the guesser is locked out
    throttled(sign_in(app, "alice", PASSWORD, client=GUESSER))  # a right guess too, unchecked
    # the owner, at the address she signed in from, is not (before: 429 for up to 15 minutes)
    assert sign_in(app, "alice", PASSWORD, client=OWNER).status_code == 303
    # and her success did not unlock the guesser's address
    throttled(sign_in(app, "alice", PASSWORD, client=GUESSER))


def test_guesses_spread_over_addresses_still_lock_the_name_for_new_addresses(app):
    _frozen(app)
    for n in range(6):  # one guess from each of six addresses
        assert refused_wrong(sign_in(app, "alice", "guess-guess", client=(f"10.7.0.{n}", 1)))
    # any address alice never signed in from is held to the name's count
    throttled(sign_in(app, "alice", PASSWORD, client=("10.7.1.1", 1)))
    throttled(sign_in(app, "alice", PASSWORD, client=OWNER))  # not signed in from it yet: the price


def test_a_guesser_on_the_owners_address_gets_only_the_pairs_allowance(app):
    _frozen(app)
    assert sign_in(app, "alice", PASSWORD, client=OWNER).status_code == 303
    for _ in range(6):
        assert refused_wrong(sign_in(app, "alice", "guess-guess", client=OWNER))
    throttled(sign_in(app, "alice", "guess-guess", client=OWNER))


def test_an_address_is_trusted_for_thirty_days_only(app):
    _frozen(app)
    assert sign_in(app, "alice", PASSWORD, client=OWNER).status_code == 303
    later = NOW + 31 * 24 * 3600
    _frozen(app, later)
    for n in range(6):
        assert refused_wrong(sign_in(app, "alice", "guess-guess", client=(f"10.8.0.{n}", 1)))
    throttled(sign_in(app, "alice", PASSWORD, client=OWNER))  # a month without signing in from it


def test_trust_is_per_account(app):
    """bob signing in from an address gives alice's name no pass there."""
    _frozen(app)
    assert sign_in(app, "bob", PASSWORD, client=OWNER).status_code == 303
    for n in range(6):
        assert refused_wrong(sign_in(app, "alice", "guess-guess", client=(f"10.9.0.{n}", 1)))
    throttled(sign_in(app, "alice", PASSWORD, client=OWNER))


def test_the_pair_counts_are_bounded(app):
    _frozen(app)
    throttle = app.state.labelx.auth.throttle
    store = app.state.labelx.store
    throttle.cap, throttle.address_free = 10, 10**6
    for n in range(30):  # names and addresses of the guesser's choosing
        assert refused_wrong(sign_in(app, f"x{n}", "guess-guess", client=(f"10.2.0.{n}", 1)))
    assert store.sign_in_failures("pair") <= 10
