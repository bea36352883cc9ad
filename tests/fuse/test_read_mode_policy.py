"""The automatic read mode's decision and switch, without FUSE (fuse_adapter/read_mode.py)."""

from __future__ import annotations

import dataclasses
import os

from fuse_adapter.fast_path import AUTO_DEFAULT, Asked, Build, decide
from fuse_adapter.fastread import FastReads
from fuse_adapter.passthrough import PassthroughOpens
from fuse_adapter.read_mode import Decision, ReadMode, min_opens_for
from tests.fuse.test_passthrough_policy import FULL as PASSTHROUGH_FULL

FULL = dataclasses.replace(PASSTHROUGH_FULL, sample_cached=True)  # a build that can sample the page cache


def test_warm_ticks_decide_after_enough_opens() -> None:
    d = Decision(min_opens=100)
    assert not d.tick(60, 60)
    assert d.tick(120, 118)  # 58 of 60 this tick: >= 95 %
    assert d.tick(120, 118)  # decided stays decided


def test_a_tick_with_cold_opens_starts_the_count_again() -> None:
    d = Decision(min_opens=100)
    assert not d.tick(90, 90)
    assert not d.tick(150, 100)  # 10 of 60 cached: the working set is not in RAM
    assert not d.tick(240, 190)  # 90 warm since: not enough yet
    assert d.tick(260, 210)


def test_ssd_hit_epochs_never_decide() -> None:
    d = Decision(min_opens=16)
    sampled = resident = 0
    for _ in range(100):  # every open finds its page file out of the page cache, a few in
        sampled += 100
        resident += 3
        assert not d.tick(sampled, resident)


def test_small_datasets_ask_less_evidence() -> None:
    assert min_opens_for(30) == 16 and min_opens_for(100) == 50 and min_opens_for(10**6) == 256


class FakePtTable:
    def __init__(self) -> None:
        self.published: dict[int, int] = {}
        self.retracted: list[int] = []

    def publish(self, ino: int, fd: int) -> int:
        self.published[ino] = fd
        return 1

    def handle(self, ino: int):
        return (ino, 1)

    def handles(self, ino: int) -> int:
        return -1

    def held_fd(self, ino: int) -> int:
        return os.dup(self.published[ino]) if ino in self.published else -1

    def retract(self, ino: int) -> bool:
        self.retracted.append(ino)
        return True


class FakeFrTable:
    def __init__(self) -> None:
        self.published: dict[int, int] = {}

    def publish(self, ino: int, fd: int) -> None:
        self.published[ino] = fd

    def retract(self, ino: int) -> bool:
        os.close(self.published.pop(ino))
        return True


def test_the_switch_hands_verified_files_over_and_refuses_changed_ones() -> None:
    pt_table, fr_table = FakePtTable(), FakeFrTable()
    pt = PassthroughOpens(pt_table, wanted=True)
    fr = FastReads(fr_table, wanted=True)
    fds = {ino: os.open(os.devnull, os.O_RDONLY) for ino in (5, 6, 7)}
    for ino, fd in fds.items():
        assert pt.publish(ino, fd) is not None
    changed = {6}  # its page file changed after it was verified: never handed over
    mode = ReadMode(
        auto=True,
        passthrough=pt,
        fastread=fr,
        still_verified=lambda ino, fd: ino not in changed,
        min_opens=16,
    )
    assert mode.waiting and mode.stats()["read_mode"] == "auto: passthrough"
    assert not mode.tick({"opens_sampled": 10, "opens_resident": 10})
    assert mode.tick({"opens_sampled": 20, "opens_resident": 20})
    assert mode.begin() and not mode.begin()  # once
    assert set(fr_table.published) == {5, 7} and mode.carried == 2
    assert sorted(pt_table.retracted) == [5, 6, 7] and not pt.active and pt.wanted  # releases still served
    assert mode.draining and mode.stats()["read_mode"] == "auto: draining"
    assert not mode.drained(2)  # passthrough handles still open: no ENOSYS yet
    assert mode.drained(0) and mode.switched and mode.transition
    assert not mode.transition_tick(100)  # the first tick after the switch: the reference
    assert not mode.transition_tick(130)  # the first epoch's READs
    assert mode.transition_tick(130) and not mode.transition  # a quiet tick: over
    s = mode.stats()
    assert s["read_mode"] == "auto: zero-message" and s["read_mode_page_files_carried"] == 2
    assert not mode.waiting and not mode.tick({"opens_sampled": 99, "opens_resident": 99})
    for fd in list(fr_table.published.values()) + list(pt_table.published.values()):
        os.close(fd)


def test_decide_auto_arms_both_tables_and_starts_in_passthrough() -> None:
    fast = decide(Asked(auto=True), FULL, backs_files=True)
    assert fast.auto and fast.passthrough and fast.fastread and not fast.zero_message_open
    assert "automatic" in fast.summary()
    # explicit flags force a mode
    assert not decide(Asked(passthrough=True), FULL, backs_files=True).auto
    assert not decide(Asked(passthrough=False), FULL, backs_files=True).auto
    # impossible without READs in C, page files or zero-message opens: the fixed modes
    assert not decide(Asked(auto=True, fastloop=False), FULL, backs_files=True).auto
    assert not decide(Asked(auto=True), FULL, backs_files=False).auto
    no_open_fh = Build(**{**FULL.__dict__, "no_open_fh": None})
    assert not decide(Asked(auto=True), no_open_fh, backs_files=True).auto
    # no flag: the automatic mode is the default (AUTO_DEFAULT), where it can run
    default = decide(Asked(), FULL, backs_files=True)
    assert AUTO_DEFAULT and default.auto and default.passthrough and default.fastread
    assert default.summary().startswith("opens: automatic (passthrough, answered in C until")
    assert not decide(Asked(), PASSTHROUGH_FULL, backs_files=True).auto  # no page-cache sampling


def test_a_switch_whose_handles_stay_open_is_given_up() -> None:
    now = [0.0]
    pt = PassthroughOpens(FakePtTable(), wanted=True)
    fr = FastReads(FakeFrTable(), wanted=True)
    mode = ReadMode(
        auto=True,
        passthrough=pt,
        fastread=fr,
        still_verified=lambda ino, fd: True,
        min_opens=16,
        drain_seconds=5.0,
        clock=lambda: now[0],
    )
    assert mode.tick({"opens_sampled": 20, "opens_resident": 20}) and mode.begin()
    now[0] = 4.0
    assert not mode.drained(1) and mode.draining
    now[0] = 6.0
    assert not mode.drained(1)  # a file held open (or mapped) past the bound
    assert mode.state == "passthrough" and pt.active and mode.aborts == 1
    assert not mode.tick({"opens_sampled": 25, "opens_resident": 25})  # decided from scratch
    assert mode.tick({"opens_sampled": 40, "opens_resident": 40})
    mode.aborts = 3
    assert not mode.waiting and not mode.tick({"opens_sampled": 99, "opens_resident": 99})
