"""What a caller sees of a version's lineage: the datasets it was made from, if it may read them.

Three producers name the dataset a version was made from, as ``name@vN``: ``Catalog.derive``
(``derived_from``, and its generated message ``derive name@vN where …``), LabelX (``from``)
and pack (``source``, ``source_dataset``/``source_version``, the ``job`` id hashed from them,
and the message ``pack name@vN``). A caller who may not read that dataset gets the very
answer a missing dataset gives everywhere else (``access.hidden``), so a version must not name
it either: for that caller those fields are ``null`` and the message says ``(hidden dataset)``
where it named it. The rest (the kind of lineage, the filter, the project, the pack's
parameters) stays, so the version still says how it was made. Callers who may read the source
(nodes and pack workers through the remote store, the source's own readers) see the lineage
as it was committed. The browser's lineage graph leaves such sources out likewise
(``datahub.browser.lineage``). So does a pack target's description written before ``datahub
pack`` stopped naming the source there (``LineageView.dataset``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from datahub.api.access import Principal, can
from datahub.catalog.descriptions import PACKED_FROM
from datahub.catalog.model import Dataset, Version
from datahub.errors import DatasetNotFound

HIDDEN = "(hidden dataset)"


def _source(lineage: Mapping[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """The source reference (``name@vN``) a lineage names and the keys that name it, if any."""
    if isinstance(lineage.get("derived_from"), str):
        return lineage["derived_from"], ("derived_from",)
    if lineage.get("source") == "labelx" and isinstance(lineage.get("from"), str):
        return lineage["from"], ("from",)
    if lineage.get("kind") == "pack" and isinstance(lineage.get("source"), str):
        return lineage["source"], ("source", "source_dataset", "source_version", "job")
    return None


class LineageView:
    """One caller's view of lineages; remembers each source dataset's answer for the request
    (a log of 10,000 derived versions reads the source's access list once)."""

    def __init__(self, principal: Principal, get_dataset: Callable[[str], Any]) -> None:
        self._principal, self._get_dataset = principal, get_dataset
        self._readable: dict[str, bool] = {}

    def _may_read(self, name: str) -> bool:
        if self._principal.is_admin:
            return True
        if name not in self._readable:
            try:
                self._readable[name] = can(self._principal, self._get_dataset(name), "reader")
            except DatasetNotFound:  # a deleted source reads as one the caller may not read
                self._readable[name] = False
        return self._readable[name]

    def readable_source(self, lineage: Mapping[str, Any] | None) -> tuple[str, int] | None:
        """The version (dataset, seq) a commit's ``lineage`` says it was made from, when it
        names one as ``name@vN`` and this caller may read that dataset; else None."""
        found = _source(lineage or {})
        if found is None:
            return None
        name, _, ref = found[0].partition("@")
        if not (
            ref[:1] == "v" and ref[1:].isascii() and ref[1:].isdigit() and len(ref) < 20
        ) or not self._may_read(name):
            return None
        return name, int(ref[1:])

    def dataset(self, d: Dataset) -> Dataset:
        """``d`` as this caller may see it: a pack target's description written by ``datahub
        pack`` before (``packed from name@vN``) names the source, shown as a lineage's is,
        wherever it stands in the text: a copy of it made before copies left it out (a LabelX
        commit into a new dataset added `` (labels from LabelX project P)``) named the source
        to that dataset's readers (``datahub.catalog.descriptions``)."""

        def shown(found: re.Match[str]) -> str:
            return found[0] if self._may_read(found[1]) else f"packed from {HIDDEN}"

        description = PACKED_FROM.sub(shown, d.description)
        return d if description == d.description else replace(d, description=description)

    def version(self, v: Version) -> Version:
        """``v`` as this caller may see it (the same object when nothing is hidden)."""
        found = _source(v.lineage)
        if found is None:
            return v
        ref, keys = found
        if self._may_read(ref.partition("@")[0]):
            return v
        lineage = {k: (None if k in keys else value) for k, value in v.lineage.items()}
        return replace(v, lineage=lineage, message=v.message.replace(ref, HIDDEN))
