"""Passwords, sessions, CSRF tokens and API tokens (promise 5: nobody reads what they may not).

- Passwords: ``hashlib.scrypt`` with a random 16-byte salt per user (n=2**14, r=8, p=1),
  compared in constant time. Only the hash is stored.
- Sessions: a random 32-byte id in an HttpOnly, SameSite=Strict cookie (Secure over https or
  when configured); the store keeps only its SHA-256, so a leaked database opens no session.
  The cookie's name and each id carry the labelx.db's instance id (``session_cookie``,
  ``Auth.ours``), so another LabelX's on the host is left alone.
- CSRF: a synchronizer token per session, handed to the page and required in the
  ``X-CSRF-Token`` header of every state-changing request. The login form (no session yet)
  uses a double-submit token: the cookie and the form field must match; like a session id it
  starts with the instance id, under a cookie name of the instance's own (``new_form_token``).
- Failed sign-ins are throttled (``SignInThrottle``): per account name, per client address
  and per pair of the two, a growing lock-out answered 429 ``too_many_attempts`` with
  ``Retry-After``; an address the account signed in from lately is held to the pair's count,
  not the name's, so a guesser elsewhere does not lock the owner out.
- API tokens for scripts: ``lx_<random>`` sent as ``Authorization: Bearer``; stored hashed.
  Bearer requests carry no cookie, so they need no CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from datahub.errors import AccessDenied, InvalidInput, NotFound, TooManyAttempts, Unauthenticated
from labelx.accounts import DISABLED
from labelx.entities import User
from labelx.store import LabelStore

SESSION_COOKIE = "labelx_session"  # + "_<instance>": the name one labelx.db's sessions are sent under
LOGIN_CSRF_COOKIE = "labelx_login_csrf"  # + "_<instance>", as the session's (caller72)
LOGIN_NAME_COOKIE = "labelx_login_name"  # + "_<instance>": the user name a refused login typed
CSRF_HEADER = "x-csrf-token"
SESSION_TTL = 12 * 3600.0
_N, _R, _P = 2**14, 8, 1
MIN_PASSWORD = 8
TOKEN_DAYS = 30  # what a token made over the API opens things for, unless it asks otherwise (caller37)


def hash_password(password: str) -> str:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD:
        raise InvalidInput(f"a password needs at least {MIN_PASSWORD} characters")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        algo, n, r, p, salt, digest = stored.split("$")
    except ValueError:
        return False
    if algo != "scrypt":
        return False
    got = hashlib.scrypt(
        password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=len(digest) // 2
    )
    return hmac.compare_digest(got.hex(), digest)


def session_cookie(instance: str) -> str:
    """The session cookie's name for the labelx.db whose instance id is ``instance``
    (``LabelStore.instance``). Why not one name for all (caller44): a browser keeps cookies by
    host, not port, and one cookie per name and path, so with two LabelX servers on one host
    signing in to one replaced the other's cookie: signing in to B signed the person out of A."""
    return f"{SESSION_COOKIE}_{instance}"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_DUMMY_HASH = "scrypt$16384$8$1$" + "00" * 16 + "$" + "00" * 32


@dataclass(frozen=True, slots=True)
class Principal:
    """Who makes a request, and how: ``csrf`` is None for bearer-token requests; ``proof`` is
    the credential it came with (``("session", id hash)`` or ``("token", token hash)``)."""

    user: User
    csrf: str | None
    proof: tuple[str, str] | None = None


def client_address(host: str | None) -> str:
    """The client address failed sign-ins are counted under: an IPv6 address by its /64 (one
    host, or one home or cloud VM, is given a whole /64: counted per address, it had 2**64
    fresh counts); an IPv4 address (also IPv4-mapped IPv6) as it is; anything else (a test
    client's name, a Unix socket) as given."""
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return host or "unknown"
    if ip.version == 6 and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(getattr(ip, "ipv4_mapped", None) or ip)


@dataclass
class SignInThrottle:
    """How many failed password checks an account name, a client address and the pair of the
    two may have before they are locked out, and for how long (docs/labelx.md, "Sign-in
    throttling").

    The first ``account_free`` failures of a name, or of a (name, address) pair, and the first
    ``address_free`` of an address, cost nothing; each one after locks it for ``base`` seconds,
    doubled each time up to ``longest``. A lock refuses every attempt, a right password too,
    unchecked: a success during it would tell the attacker the guess was right. A success
    resets the name's and the pair's counts and gives the address its attempt back. A count
    with no lock left is forgotten ``forget`` seconds after its last failure. Every name typed
    is counted, an account or not, so a 429 never tells whether one exists.

    Why the pair (caller43): counted per name only, anyone guessing one account's password
    locked its owner out for up to 15 minutes at a time, from everywhere, for as long as they
    kept guessing. Now an address this account signed in from within ``trusted`` seconds is
    held to the pair's count (and the address's) only, never to the name's: the owner at their
    desk keeps signing in while someone elsewhere guesses. Every other address is held to the
    name's count too, so guesses spread over many addresses stay as slow as before. The counts
    are in labelx.db, beside the sessions (``AccountRecords.begin_sign_in``), so every worker
    process shares them; at most ``cap`` of each kind are kept (plus one per account)."""

    account_free: int = 5
    address_free: int = 20
    base: float = 1.0
    longest: float = 900.0
    forget: float = 24 * 3600.0
    trusted: float = 30 * 24 * 3600.0
    cap: int = 10_000

    def lock_for(self, kind: str, failures: int) -> float:
        over = failures - (self.address_free if kind == "address" else self.account_free)
        return 0.0 if over <= 0 else min(self.base * 2 ** min(over - 1, 40), self.longest)


@dataclass
class Attempt:
    """A sign-in attempt counted as failed until it succeeds (``Auth.succeeded``)."""

    account: tuple[str, str]
    locks: dict[tuple[str, str], float] = field(default_factory=dict)
    pair: tuple[str, str] | None = None


def account_key(name: str) -> tuple[str, str]:
    """The row an account name's failures are counted in: the name itself (the store keeps an
    existing account's row however many others come), or its SHA-256 when too long to be one
    (so a row stays small)."""
    return ("account", name if len(name) <= 256 else "sha256:" + sha256(name))


def pair_key(name: str, address: str | None) -> str:
    """The key of one account name typed from one client address (``client_address``)."""
    return account_key(name)[1] + "\n" + client_address(address)


class Auth:
    def __init__(self, store: LabelStore, throttle: SignInThrottle | None = None) -> None:
        self.store = store
        self.throttle = throttle or SignInThrottle()
        self.instance = store.instance
        self.session_cookie = session_cookie(self.instance)
        self.login_csrf_cookie = f"{LOGIN_CSRF_COOKIE}_{self.instance}"
        self.login_name_cookie = f"{LOGIN_NAME_COOKIE}_{self.instance}"

    def new_form_token(self) -> str:
        """The login form's double-submit token: it starts with this labelx.db's instance id,
        as its session ids do, and is set under this instance's own cookie name.

        Why (caller72): every LabelX on a host named the form's cookie ``labelx_login_csrf``
        (and the typed name's ``labelx_login_name``), and a browser keeps cookies by host, not
        port: opening B's sign-in form replaced A's token, so A's form, sent next, was "expired",
        and B's form came filled with the user name typed into A's. A token of another instance
        under this one's name is refused (``form_token_ok``)."""
        return f"{self.instance}.{secrets.token_urlsafe(24)}"

    def form_token_ok(self, cookie: str, sent: str) -> bool:
        """Whether the login form's token ``sent`` is this instance's and matches its cookie."""
        return self.ours(cookie) and bool(sent) and hmac.compare_digest(cookie.encode(), sent.encode())

    def ours(self, session_id: str | None) -> bool:
        """Whether a session id is one this labelx.db made: each starts with its instance id and
        a dot. Another one (another LabelX's on this host, one made before caller44) is never
        looked up, refused or expired: it is simply not this LabelX's."""
        return bool(session_id) and session_id.startswith(self.instance + ".")

    def attempt(self, name: str, address: str | None) -> Attempt:
        """Count a password check for ``name`` from ``address`` before it is made; raise
        TooManyAttempts (429) instead while the pair, the address or (from an address the
        account has not signed in from lately) the name is locked out."""
        account = account_key(name)
        pair = ("pair", pair_key(name, address))
        t = self.throttle
        keys = [pair, ("address", client_address(address))]
        if not self.store.signed_in_from(pair[1], t.trusted):
            keys.append(account)
        wait, locks = self.store.begin_sign_in(keys, t.lock_for, t.forget, t.cap)
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            raise TooManyAttempts(
                f"too many failed sign-ins for this user name or from this address: wait {seconds} s "
                "and try again (forgot the password? the operator sets a new one where the server "
                "runs: `datahub labelx set-password NAME`)",
                retry_after=seconds,
            )
        return Attempt(account, locks, pair)

    def succeeded(self, attempt: Attempt) -> None:
        """The password was right: the account's and the pair's counts start again, and the
        pair's address is one this account signs in from (``end_sign_in``)."""
        self.store.end_sign_in(attempt.locks, attempt.account, attempt.pair)

    def login(self, name: str, password: str, address: str | None = None) -> tuple[str, str]:
        """Return (session id, csrf token); Unauthenticated on a bad name or password,
        TooManyAttempts while the name or ``address`` (the client's) is locked out."""
        attempt = self.attempt(name, address)
        found = self.store.user_with_hash(name)
        usable = found is not None and found[1] != DISABLED
        # hash even for unknown or disabled users, so timing does not reveal which names exist
        ok = verify_password(password, found[1] if found and usable else _DUMMY_HASH) and usable
        if not ok or found is None:
            raise Unauthenticated("wrong user name or password")
        session_id, csrf = f"{self.instance}.{secrets.token_urlsafe(32)}", secrets.token_urlsafe(32)
        # only while the hash checked is still the account's (a password change meanwhile: out)
        if not self.store.create_session(sha256(session_id), found[0].id, csrf, SESSION_TTL, found[1]):
            raise Unauthenticated("wrong user name or password")
        self.succeeded(attempt)
        return session_id, csrf

    def logout(self, session_id: str) -> None:
        if self.ours(session_id):
            self.store.delete_session(sha256(session_id))

    def from_session(self, session_id: str | None) -> Principal | None:
        if session_id is None or not self.ours(session_id):
            return None
        found = self.store.session(sha256(session_id))
        return None if found is None else Principal(found[0], found[1], ("session", sha256(session_id)))

    def from_bearer(self, authorization: str | None) -> Principal | None:
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        token_hash = sha256(authorization[7:].strip())
        user = self.store.token_user(token_hash)
        if user is None:
            raise Unauthenticated(
                "invalid API token; create one with `datahub labelx create-token NAME --description WHAT` "
                "(NAME: your LabelX account), where the LabelX server runs"
            )
        return Principal(user, None, ("token", token_hash))

    def revoke_token(self, by: User, token: str, token_hash: str = "") -> None:
        """Delete a token, given its secret or its id (``token_hash``, what the admin page's
        list shows), and the tokens made with it (``delete_token``): its owner or an admin may;
        unknown tokens are NotFound."""
        token_hash = token_hash or sha256(token)
        owner = self.store.token_user(token_hash)
        if owner is None:
            raise NotFound("no such API token (already revoked?)")
        if owner.id != by.id and not by.is_admin:
            raise AccessDenied("only the token's owner or an admin may revoke it")
        self.store.delete_token(token_hash)

    def token_for(
        self,
        who: Principal,
        description: str = "",
        password: str = "",
        expires_days: int | None = None,
        address: str | None = None,
    ) -> str:
        """``POST /api/tokens``: a new API token for the caller, under the rule for how it came.

        A browser session must send the account's password again ("sudo mode", as GitHub
        asks): a session cookie, and the CSRF token any LabelX page shows, are enough to act
        while the session lasts, and without the password a borrowed or copied session made
        an ``lx_`` token that never expires, outlives sign-out and the person never sees
        (caller36). A bearer token may make one only for an admin (who may make whole
        accounts anyway); another's would let a leaked token outlive its own revocation.
        Nor may a bearer token make one that outlives it (``_within_caller``).
        Refusals are AccessDenied (403): a 401 sends the page to the login form.
        ``expires_days``: how long it opens anything (None: until revoked). The password check
        is throttled as the login's, on the same counts (``address``: the client's): a copied
        session could otherwise guess the password here at full speed."""
        if who.csrf is not None:  # a browser session
            if not password:
                raise AccessDenied(
                    f"an API token made from a browser session needs {who.user.name!r}'s password again: "
                    "type it in the token form (field 'password') and create it again"
                )
            attempt = self.attempt(who.user.name, address)
            found = self.store.user_with_hash(who.user.name)
            stored = found[1] if found is not None and found[1] != DISABLED else _DUMMY_HASH
            if not verify_password(password, stored) or found is None or found[1] == DISABLED:
                raise AccessDenied(
                    f"wrong password for {who.user.name!r}: no API token made; type the password you "
                    f"log in with (forgot it? the operator sets one with "
                    f"`datahub labelx set-password {who.user.name}`)"
                )
            self.succeeded(attempt)
        elif not who.user.is_admin:
            raise AccessDenied(
                f"an API token cannot make another for {who.user.name!r} (only an admin's can): log in "
                "and create one with your password (POST /api/tokens with 'password'), or have the "
                f"operator run `datahub labelx create-token {who.user.name} --description WHAT`"
            )
        ttl = None if expires_days is None else expires_days * 86400.0
        if who.csrf is None:
            self._within_caller(who, ttl)
        return self.new_token(who.user, description, proof=who, ttl=ttl)

    def _within_caller(self, who: Principal, ttl: float | None) -> None:
        """A token a bearer token makes may not outlive it: no later expiry, and none "until
        revoked" from one that expires; AccessDenied (403) otherwise. Why (caller44): a 30-day
        admin token, leaked, made one that never expires, so waiting out the leak ended nothing."""
        if who.proof is None or who.proof[0] != "token":
            return
        caller_ends = self.store.token_expiry(who.proof[1])
        if caller_ends is None:  # lasts until revoked: anything it makes ends with it (made_by)
            return
        now = self.store.clock()
        if ttl is not None and now + ttl <= caller_ends:
            return
        when = datetime.fromtimestamp(caller_ends, UTC).strftime("%Y-%m-%d %H:%M UTC")
        days = int((caller_ends - now) // 86400)
        fits = (
            f"ask for expires_days of at most {days}"
            if days >= 1
            else "it has less than a day left, so it can make none"
        )
        asked = "one that never expires" if ttl is None else f"one for {int(ttl // 86400)} days"
        raise AccessDenied(
            f"this API token expires at {when}, and a token it makes cannot outlive it ({asked} was "
            f"asked): {fits}; for a longer one, log in and create it with your password (POST "
            f"/api/tokens with 'password'), or have the operator run "
            f"`datahub labelx create-token {who.user.name} --description WHAT`"
        )

    def new_token(
        self, user: User, description: str = "", proof: Principal | None = None, ttl: float | None = None
    ) -> str:
        """A new API token for ``user``; with ``proof`` (a request's caller) only while the
        session or token that request came with still exists. Why: a password change or a
        disable ends them in its transaction, and a request authenticated just before it wrote
        a token, which never expires, just after (review19b). The operator's CLI gives none."""
        token = "lx_" + secrets.token_urlsafe(32)
        if not self.store.create_token(
            sha256(token), user.id, description, proof.proof if proof else None, ttl
        ):
            raise Unauthenticated(
                "this session or API token was ended meanwhile (the account's password was changed, "
                "or the account disabled): log in again"
            )
        return token


def check_csrf(principal: Principal, sent: str | None) -> None:
    """Every state-changing request from a browser session must echo the session's token."""
    if principal.csrf is None:
        return  # bearer token: no ambient cookie, no CSRF
    if not sent or not hmac.compare_digest(sent, principal.csrf):
        raise AccessDenied("missing or wrong CSRF token; reload the page and try again")
