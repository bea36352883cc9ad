"""LabelX accounts: users, browser sessions and API tokens, in the store's SQLite file.

A second responsibility of the store, kept apart from projects and items: who may act, as
opposed to what they act on. ``LabelStore`` mixes it in, so both share one connection pool
and one transaction discipline (``_write`` is one immediate transaction).
"""

from __future__ import annotations

import shlex
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from datahub.errors import AlreadyExists, InvalidInput, NotFound
from labelx.entities import ROLES, User

DISABLED = "!disabled"  # a password hash no password matches (``set_password``)
# the credential a request came with -> (table, column) that holds it while it is valid
_PROOFS = {"session": ("sessions", "id_hash"), "token": ("tokens", "token_hash")}


class AccountRecords:
    """Users, sessions and tokens; needs ``_conn``, ``_write`` and ``clock`` from the store."""

    clock: Callable[[], float]

    def _conn(self) -> sqlite3.Connection:  # provided by LabelStore
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:  # provided by LabelStore
        raise NotImplementedError

    # --- users ---------------------------------------------------------------------------------
    def create_user(self, name: str, role: str, pw_hash: str) -> User:
        if role not in ROLES:
            raise InvalidInput(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
        try:
            with self._write() as db:
                cur = db.execute(
                    "INSERT INTO users(name, role, pw_hash, created_at) VALUES(?,?,?,?)",
                    (name, role, pw_hash, self.clock()),
                )
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(f"user {name!r} already exists; pick another name", user=name) from exc
        return User(cur.lastrowid, name, role)

    def set_password(self, name: str, pw_hash: str) -> tuple[int, int]:
        """Replace ``name``'s password hash (``DISABLED``: no password opens the account) and end
        every session and API token of the account, in one transaction: who held the old
        password, or a session or token made with it, is out. Returns (sessions, tokens) ended.

        Why both: sessions last hours and API tokens never expire, so a new password alone
        left a person who was let go acting as the account's datahub principal."""
        with self._write() as db:
            row = db.execute("SELECT id FROM users WHERE name=?", (name,)).fetchone()
            if row is None:
                raise NotFound(
                    f"no user {name!r}; create it with `datahub labelx create-user {shlex.quote(name)} --role annotator` "
                    "(or reviewer, admin)",
                    user=name,
                )
            db.execute("UPDATE users SET pw_hash=? WHERE id=?", (pw_hash, row[0]))
            sessions = db.execute("DELETE FROM sessions WHERE user_id=?", (row[0],)).rowcount
            tokens = db.execute("DELETE FROM tokens WHERE user_id=?", (row[0],)).rowcount
        return sessions, tokens

    def user_with_hash(self, name: str) -> tuple[User, str] | None:
        row = (
            self._conn().execute("SELECT id, name, role, pw_hash FROM users WHERE name=?", (name,)).fetchone()
        )
        return None if row is None else (User(*row[:3]), row[3])

    def get_user(self, user_id: int) -> User:
        row = self._conn().execute("SELECT id, name, role FROM users WHERE id=?", (user_id,)).fetchone()
        if row is None:
            raise NotFound(f"no user with id {user_id}")
        return User(*row)

    def user_by_name(self, name: str) -> User:
        row = self._conn().execute("SELECT id, name, role FROM users WHERE name=?", (name,)).fetchone()
        if row is None:
            raise NotFound(
                f"no user {name!r}; create it first (admin page or "
                f"`datahub labelx create-user {shlex.quote(name)} --role annotator`, or reviewer, admin)"
            )
        return User(*row)

    def has_users(self) -> bool:
        """Whether any account exists (the login page tells how to make the first one)."""
        return self._conn().execute("SELECT 1 FROM users LIMIT 1").fetchone() is not None

    def list_users(self) -> list[User]:
        return [User(*r) for r in self._conn().execute("SELECT id, name, role FROM users ORDER BY name")]

    # --- sessions and tokens -------------------------------------------------------------------
    def create_session(self, id_hash: str, user_id: int, csrf: str, ttl: float, pw_hash: str) -> bool:
        """Open a session for the account only while its password hash is still ``pw_hash``, the
        one the login checked; False (nothing written) if it was replaced since. Why: a
        replacement (``set_password``, ``DISABLED``) ends every session in its transaction, and
        a login that checked the old password before it and wrote its session after kept one
        for ``SESSION_TTL`` (review19b)."""
        now = self.clock()
        with self._write() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ?", (now,))
            cur = db.execute(
                "INSERT INTO sessions SELECT ?,?,?,? WHERE EXISTS "
                "(SELECT 1 FROM users WHERE id=? AND pw_hash=?)",
                (id_hash, user_id, csrf, now + ttl, user_id, pw_hash),
            )
        return cur.rowcount == 1

    def session(self, id_hash: str) -> tuple[User, str] | None:
        row = (
            self._conn()
            .execute(
                "SELECT u.id, u.name, u.role, s.csrf FROM sessions s JOIN users u ON u.id = s.user_id "
                "WHERE s.id_hash=? AND s.expires_at >= ?",
                (id_hash, self.clock()),
            )
            .fetchone()
        )
        return None if row is None else (User(*row[:3]), row[3])

    def delete_session(self, id_hash: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM sessions WHERE id_hash=?", (id_hash,))

    def create_token(
        self,
        token_hash: str,
        user_id: int,
        description: str,
        proof: tuple[str, str] | None = None,
        ttl: float | None = None,
    ) -> bool:
        """Store a token; with ``proof`` (``("session" | "token", hash)``: the credential of the
        request asking) only while that credential still exists, in one statement. False:
        nothing written (it was ended meanwhile, ``set_password``, or revoked). ``ttl``: seconds
        it opens anything for (None: until revoked); expired ones are deleted here. A token made
        with a token records it (``made_by``), so revoking that one revokes this one too
        (``delete_token``); one made from a session or by the operator records nothing."""
        now = self.clock()
        made_by = proof[1] if proof is not None and proof[0] == "token" else None
        row = (token_hash, user_id, description, now, None if ttl is None else now + ttl, made_by)
        with self._write() as db:
            db.execute("DELETE FROM tokens WHERE expires_at < ?", (now,))
            insert = "INSERT INTO tokens(token_hash, user_id, description, created_at, expires_at, made_by)"
            if proof is None:
                db.execute(f"{insert} VALUES(?,?,?,?,?,?)", row)
                return True
            table, column = _PROOFS[proof[0]]
            cur = db.execute(
                f"{insert} SELECT ?,?,?,?,?,? WHERE EXISTS (SELECT 1 FROM {table} WHERE {column}=?)",
                (*row, proof[1]),
            )
        return cur.rowcount == 1

    def token_expiry(self, token_hash: str) -> float | None:
        """When a live token stops opening anything (seconds since the epoch; None: never, or no
        such token)."""
        row = (
            self._conn().execute("SELECT expires_at FROM tokens WHERE token_hash=?", (token_hash,)).fetchone()
        )
        return None if row is None else row[0]

    def delete_token(self, token_hash: str) -> int | None:
        """Remove a token and every token made with it, and with those, all the way down (one
        transaction); returns the id of the user it belonged to (None if unknown). Why the
        descendants (caller44): a leaked admin token made a new one, and revoking the leaked one
        left the new one working, with the leak's holder."""
        with self._write() as db:
            row = db.execute("SELECT user_id FROM tokens WHERE token_hash=?", (token_hash,)).fetchone()
            db.execute(
                "WITH RECURSIVE gone(h) AS (SELECT ? UNION SELECT t.token_hash FROM tokens t "
                "JOIN gone ON t.made_by = gone.h) DELETE FROM tokens WHERE token_hash IN (SELECT h FROM gone)",
                (token_hash,),
            )
        return None if row is None else row[0]

    def list_tokens(self, user_id: int | None = None) -> list[dict[str, Any]]:
        """Every live API token (or one user's): its id (the SHA-256 the table keeps, what
        ``delete_token`` takes), owner, description, creation and expiry time (None: never), and
        the id of the token it was made with (None: a password, a session or the operator). No
        secret: none is kept. Why: ``datahub labelx list-tokens`` shows an admin what is live,
        to revoke by id, and which tokens a revoke takes with it; an expired token opens
        nothing, so it is not listed."""
        rows = (
            self._conn()
            .execute(
                "SELECT t.token_hash, u.name, t.description, t.created_at, t.expires_at, t.made_by FROM tokens t "
                "JOIN users u ON u.id = t.user_id WHERE (? IS NULL OR t.user_id = ?) "
                "AND (t.expires_at IS NULL OR t.expires_at >= ?) "
                "ORDER BY u.name, t.created_at, t.token_hash",
                (user_id, user_id, self.clock()),
            )
            .fetchall()
        )
        keys = ("id", "user", "description", "created", "expires", "made_by")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def token_user(self, token_hash: str) -> User | None:
        row = (
            self._conn()
            .execute(
                "SELECT u.id, u.name, u.role FROM tokens t JOIN users u ON u.id = t.user_id "
                "WHERE t.token_hash=? AND (t.expires_at IS NULL OR t.expires_at >= ?)",
                (token_hash, self.clock()),
            )
            .fetchone()
        )
        return None if row is None else User(*row)

    # --- failed sign-ins (labelx.auth.SignInThrottle) ------------------------------------------
    def begin_sign_in(
        self, keys: list[tuple[str, str]], lock_for: Callable[[str, int], float], forget: float, cap: int
    ) -> tuple[float, dict[tuple[str, str], float]]:
        """Count one sign-in attempt against each ``(kind, key)`` (an account's name, a client
        address) as failed, unless one of them is locked. Returns (seconds until the last lock
        ends, {}) when refused (nothing counted), else (0, the lock each key now has).

        Counted before the password is checked, in one immediate transaction: the rows are
        shared by every process on this labelx.db (``datahub serve --workers 4``), so attempts
        sent in parallel, to one worker or several, are each counted and the one past the
        allowance locks out those after it; checked first and counted after the slow scrypt,
        they all passed the check. ``lock_for(kind, failures)``: seconds locked after that many.
        A count ``forget`` seconds old with no lock left is dropped; past ``cap`` rows of a kind
        the least recent ones go, never an existing account's (``_make_room``)."""
        now = self.clock()
        with self._write() as db:
            rows: dict[tuple[str, str], int] = {}
            wait = 0.0
            for kind, key in keys:
                row = db.execute(
                    "SELECT failures, last_at, locked_until FROM sign_in_failures WHERE kind=? AND key=?",
                    (kind, key),
                ).fetchone()
                if row is not None and row[2] > now:
                    wait = max(wait, row[2] - now)
                forgotten = row is None or (row[1] < now - forget and row[2] <= now)
                rows[(kind, key)] = 0 if forgotten else row[0]
            if wait > 0:
                return wait, {}
            locks = {}
            for (kind, key), failures in rows.items():
                if failures == 0:
                    self._make_room(db, kind, now - forget, now, cap)
                locks[(kind, key)] = now + lock_for(kind, failures + 1)
                db.execute(
                    "INSERT INTO sign_in_failures(kind, key, failures, last_at, locked_until) VALUES(?,?,?,?,?) "
                    "ON CONFLICT(kind, key) DO UPDATE SET failures=excluded.failures, "
                    "last_at=excluded.last_at, locked_until=excluded.locked_until",
                    (kind, key, failures + 1, now, locks[(kind, key)]),
                )
        return 0.0, locks

    @staticmethod
    def _make_room(db: sqlite3.Connection, kind: str, stale: float, now: float, cap: int) -> None:
        """Keep at most ``cap`` rows of ``kind`` (plus one per existing account): drop counts
        older than ``stale`` with no lock left, then the least recent ones, never an existing
        account's. Why: the names typed and the addresses are the caller's to choose, so an
        attacker could grow the table without bound; an existing account's count is bounded by
        the accounts and must never be flushed out by flooding other names."""
        if db.execute("SELECT COUNT(*) FROM sign_in_failures WHERE kind=?", (kind,)).fetchone()[0] < cap:
            return
        db.execute(
            "DELETE FROM sign_in_failures WHERE kind=? AND last_at < ? AND locked_until <= ?",
            (kind, stale, now),
        )
        excess = (
            db.execute("SELECT COUNT(*) FROM sign_in_failures WHERE kind=?", (kind,)).fetchone()[0] - cap + 1
        )
        if excess > 0:
            db.execute(
                "DELETE FROM sign_in_failures WHERE rowid IN (SELECT rowid FROM sign_in_failures "
                "WHERE kind=? AND NOT (kind='account' AND key IN (SELECT name FROM users)) "
                "ORDER BY last_at LIMIT ?)",
                (kind, excess),
            )

    def end_sign_in(
        self, locks: dict[tuple[str, str], float], reset: tuple[str, str], pair: tuple[str, str] | None = None
    ) -> None:
        """A sign-in that ``begin_sign_in`` counted succeeded: ``reset`` (the account) and
        ``pair`` (the account from this address) start from zero, and ``pair`` is remembered
        as an address the account signs in from (``signed_in_from``); every other key (the
        address) gets its attempt back, and the lock that attempt set if it is still the key's.
        Why not reset the address: one account's owner signing in would wipe the count of
        guesses from that address at everyone else's."""
        now = self.clock()
        with self._write() as db:
            db.execute("DELETE FROM sign_in_failures WHERE kind=? AND key=?", reset)
            if pair is not None:
                db.execute("DELETE FROM sign_in_failures WHERE kind=? AND key=?", pair)
                self._make_room(db, "known", 0.0, now, self._known_cap)
                db.execute(
                    "INSERT INTO sign_in_failures(kind, key, failures, last_at, locked_until) "
                    "VALUES('known', ?, 0, ?, 0) ON CONFLICT(kind, key) DO UPDATE SET last_at=excluded.last_at",
                    (pair[1], now),
                )
            for (kind, key), lock in locks.items():
                if (kind, key) in (reset, pair):
                    continue
                db.execute(
                    "UPDATE sign_in_failures SET failures=MAX(failures - 1, 0), locked_until="
                    "CASE WHEN locked_until=? THEN last_at ELSE locked_until END WHERE kind=? AND key=?",
                    (lock, kind, key),
                )

    _known_cap = 10_000  # addresses remembered for sign-ins, all accounts together (least recent go)

    def signed_in_from(self, pair: str, within: float) -> bool:
        """Whether the account signed in from the address ``pair`` names (``labelx.auth.
        pair_key``) in the last ``within`` seconds: such an address is not held to the
        account's own count of failures (``labelx.auth.SignInThrottle``)."""
        row = (
            self._conn()
            .execute("SELECT last_at FROM sign_in_failures WHERE kind='known' AND key=?", (pair,))
            .fetchone()
        )
        return row is not None and row[0] >= self.clock() - within

    def sign_in_failures(self, kind: str) -> int:
        """How many counts of ``kind`` (``account``, ``address``) are kept (tests, diagnostics)."""
        return (
            self._conn().execute("SELECT COUNT(*) FROM sign_in_failures WHERE kind=?", (kind,)).fetchone()[0]
        )
