"""review13c: adversarial checks of labelx13's migration of an old labelx.db (``_migrate``) and
its one-time read of old projects' labels (``LabelService._read_dataset_labels``): several
processes opening one old file at once, label values that are not strings, a project bigger
than one read batch."""

from __future__ import annotations

import multiprocessing
import sqlite3

from datahub.catalog import Patch
from labelx.app import create_labelx_app
from tests.labelx.conftest import Session, make_project
from tests.labelx.open_store import open_at_signal
from tests.labelx.test_dataset_label import _items, _make_old


def test_several_processes_open_one_old_labelx_db_at_once(app, env) -> None:
    """Each process migrates or finds it migrated; none fails, and the columns are there once."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    path = app.state.labelx.store.path
    app.state.labelx.store.close()
    _make_old(path)
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=open_at_signal, args=(path, start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    results = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    assert results == ["ok"] * 4
    db = sqlite3.connect(path)
    assert [r[1] for r in db.execute("PRAGMA table_info(items)")].count("dataset_label") == 1
    assert db.execute("SELECT dataset_labels_read FROM projects WHERE id=?", (pid,)).fetchone() == (0,)
    db.close()


def test_an_old_project_reads_labels_that_are_not_strings(app, env) -> None:
    """A number, a list and an object as the version's label: kept as the version has them."""
    values = {"img/0001.jpg": 7, "img/0002.jpg": ["truck", "red"], "img/0003.jpg": {"name": "ship"}}
    seq = env.catalog.commit(
        "pets", [Patch(k, labels={"class": v}) for k, v in values.items()], message="odd"
    ).seq
    admin = Session(app, "admin")
    pid = make_project(admin, version=seq)["id"]
    before = {k: (i["dataset_label"], i["dataset_label_fits"]) for k, i in _items(admin, pid).items()}
    path = app.state.labelx.store.path
    app.state.labelx.store.close()
    _make_old(path)
    again = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    try:
        items = _items(Session(again, "alice"), pid)
        for key, value in values.items():
            assert (items[key]["dataset_label"], items[key]["dataset_label_fits"]) == (value, False)
        assert {k: (i["dataset_label"], i["dataset_label_fits"]) for k, i in items.items()} == before
        assert again.state.labelx.store.get_project(pid).dataset_labels_read
    finally:
        again.state.labelx.store.close()


def test_an_old_project_bigger_than_a_read_batch_reads_every_item(app, env, monkeypatch) -> None:
    """Paged: with a batch of 2 the read takes several pages (also a last, exactly full one)
    and every item gets its label; the project is marked read once all are."""
    import labelx.service

    seq = env.catalog.commit(
        "pets", [Patch(f"img/{i:04d}.jpg", labels={"class": f"c{i}"}) for i in range(4)], message="all"
    ).seq
    admin = Session(app, "admin")
    pid = make_project(admin, version=seq)["id"]
    path = app.state.labelx.store.path
    app.state.labelx.store.close()
    _make_old(path)
    monkeypatch.setattr(labelx.service, "_READ_BATCH", 2)
    again = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    try:
        items = _items(Session(again, "alice"), pid)
        assert len(items) > 4  # more than two full batches
        assert {f"img/{i:04d}.jpg": items[f"img/{i:04d}.jpg"]["dataset_label"] for i in range(4)} == {
            f"img/{i:04d}.jpg": f"c{i}" for i in range(4)
        }
        assert again.state.labelx.store.get_project(pid).dataset_labels_read
    finally:
        again.state.labelx.store.close()
