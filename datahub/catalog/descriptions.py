"""The one description datahub wrote that names another dataset, and how a copy leaves it out.

``datahub pack`` once described the targets it created as ``packed from name@vN``; it no
longer does (``datahub.pack.job.TARGET_DESCRIPTION``), but targets made before keep that
text. Two readers may differ in what they may read: a reader of the target need not be a
reader of the source, so the API hides the name from such a reader when it shows the
description (``datahub.api.lineage.LineageView.dataset``). A copy of the description into
another dataset (a derive's new target, a LabelX commit into a new dataset) would carry the
name to that dataset's readers, who may read neither; so a copy says only that its source
was packed (``copyable``), and the version's lineage, hidden likewise, names the source.
"""

from __future__ import annotations

import re

#: a pack target's old description: ``packed from name@vN`` (the name is group 1)
PACKED_FROM = re.compile(r"packed from ([^@\s]+)@v[0-9]+")
#: what a copy says in its place: the fact, without the name
PACKED = "packed by datahub pack"


def copyable(description: str) -> str:
    """``description`` as a copy into another dataset may carry it: with every ``packed from
    name@vN`` replaced by a text that names no dataset (the rest as written)."""
    return PACKED_FROM.sub(PACKED, description)
