"""Counts in words for people: ``counted(1, "file")`` is ``1 file``, ``counted(2, "file")`` ``2 files``.

Why: the CLI said ``1 objects scanned``, ``1 changes`` and ``1 records`` (newuser44). A line
for people that puts a count before a noun says it through here; ``--json`` keeps the numbers.
"""

from __future__ import annotations


def plural(word: str) -> str:
    """The English plural of the nouns counted here: ``file`` -> ``files``, ``entry`` ->
    ``entries``, ``process`` -> ``processes`` (the last word of ``running cache process``)."""
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u"):
        return word[:-1] + "ies"
    return word + "s"


def noun(n: int, word: str, many: str | None = None) -> str:
    """``word`` as it follows the count ``n``: plural unless ``n`` is 1 (``many`` when given)."""
    return word if n == 1 else many or plural(word)


def counted(n: int, word: str, many: str | None = None, *, thousands: bool = False) -> str:
    """``n`` and ``word`` after it (``1 file``, ``2 files``; ``1,200 files`` with ``thousands``)."""
    return f"{n:,} {noun(n, word, many)}" if thousands else f"{n} {noun(n, word, many)}"
