"""The bucket snapshot warm-up policy's decisions (datahub.cache.warmup_policy), on a fake clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from datahub.cache.warmup_policy import Decision, PolicySettings, Reason, WarmupPolicy, common_dir

ROOT = "s3://b/p/"
SETTINGS = PolicySettings(fits_max_objects=100, opens=4, window_seconds=10.0, idle_stop_seconds=60.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy(mode: bool | None = None, clock: Clock | None = None) -> WarmupPolicy:
    return WarmupPolicy(SETTINGS, mode, ROOT, clock or Clock())


def always(_scope: str) -> bool:
    return True


def test_a_snapshot_that_fits_is_warmed_whole_once_listed() -> None:
    assert policy().listed(objects=100, nbytes=10_000, room=10_000) == Decision(Reason.FITS, ROOT, True)


def test_a_snapshot_too_large_or_with_too_many_objects_waits_for_readers() -> None:
    assert policy().listed(objects=100, nbytes=10_001, room=10_000) is None
    assert policy().listed(objects=101, nbytes=10, room=10_000) is None  # the bound of the waste
    assert policy().listed(objects=0, nbytes=0, room=10_000) is None


def test_the_flags_override_the_policy() -> None:
    assert policy(True).listed(objects=10**6, nbytes=10**15, room=1) == Decision(Reason.FLAG, ROOT, True)
    off = policy(False)
    assert off.listed(objects=1, nbytes=1, room=10) is None
    assert all(off.cold_open(f"{ROOT}{i}", always) is None for i in range(100))
    on = policy(True)
    assert all(on.cold_open(f"{ROOT}{i}", always) is None for i in range(100))  # the flag decided


def test_a_handful_of_cold_opens_starts_nothing() -> None:
    p = policy()
    assert [p.cold_open(f"{ROOT}train/{i}.jpg", always) for i in range(3)] == [None] * 3


def test_distinct_cold_opens_in_the_window_warm_the_directory_that_holds_them() -> None:
    p = policy()
    urls = [f"{ROOT}train/c{i % 2}/{i}.jpg" for i in range(4)]
    decisions = [p.cold_open(u, always) for u in urls]
    assert decisions[:3] == [None] * 3
    assert decisions[3] == Decision(Reason.PATTERN, f"{ROOT}train/", True)
    # the reader keeps opening files the warm-up has not reached: nothing new
    assert all(p.cold_open(f"{ROOT}train/c3/{i}.jpg", always) is None for i in range(10))


def test_the_same_file_opened_again_is_not_an_epoch() -> None:
    p = policy()
    assert all(p.cold_open(f"{ROOT}a.jpg", always) is None for _ in range(20))


def test_opens_spread_over_more_than_the_window_are_not_a_pattern() -> None:
    clock = Clock()
    p = policy(clock=clock)
    for i in range(20):
        assert p.cold_open(f"{ROOT}x/{i}.jpg", always) is None
        clock.now += 4.0  # 3 opens per 10 s window at most
    clock.now += 20.0  # the x opens have left the window
    for i in range(3):
        p.cold_open(f"{ROOT}y/{i}.jpg", always)
    assert p.cold_open(f"{ROOT}y/3.jpg", always) == Decision(Reason.PATTERN, f"{ROOT}y/", True)


def test_a_scope_that_does_not_fit_is_skipped_and_not_looked_at_again() -> None:
    asked: list[str] = []

    def never(scope: str) -> bool:
        asked.append(scope)
        return False

    p = policy()
    decisions = [p.cold_open(f"{ROOT}big/{i}", never) for i in range(4)]
    assert decisions[3] == Decision(Reason.PATTERN, f"{ROOT}big/", False)
    assert all(p.cold_open(f"{ROOT}big/{i}", never) is None for i in range(4, 40))
    assert asked == [f"{ROOT}big/"]


def test_a_pattern_outside_what_is_warmed_widens_it() -> None:
    p = policy()
    for i in range(4):
        p.cold_open(f"{ROOT}a/{i}", always)
    assert p.covered == f"{ROOT}a/"
    found = [p.cold_open(f"{ROOT}b/{i}", always) for i in range(4)]
    assert found[3] == Decision(Reason.PATTERN, ROOT, True)  # a/ and b/: their common directory


def test_an_automatic_pass_stops_when_its_readers_go_idle_a_flag_pass_does_not() -> None:
    p = policy()
    assert not p.should_stop(Reason.PATTERN, idle_for=59.0, running_for=500.0)
    assert p.should_stop(Reason.PATTERN, idle_for=60.0, running_for=500.0)
    assert p.should_stop(Reason.FITS, idle_for=float("inf"), running_for=60.0)  # nobody came to read
    assert not p.should_stop(Reason.FITS, idle_for=float("inf"), running_for=30.0)
    assert not p.should_stop(Reason.FLAG, idle_for=float("inf"), running_for=10**6)


def test_a_stopped_pass_is_started_again_by_the_next_pattern() -> None:
    p = policy()
    for i in range(4):
        p.cold_open(f"{ROOT}a/{i}", always)
    p.stopped()
    found = [p.cold_open(f"{ROOT}a/{i}", always) for i in range(10, 14)]
    assert found[3] == Decision(Reason.PATTERN, f"{ROOT}a/", True)


def test_common_dir() -> None:
    assert common_dir(["s3://b/p/x/1.jpg"]) == "s3://b/p/x/"
    assert common_dir(["s3://b/p/x/1.jpg", "s3://b/p/x/2.jpg"]) == "s3://b/p/x/"
    assert common_dir(["s3://b/p/xa/1", "s3://b/p/xb/1"]) == "s3://b/p/"
    assert common_dir(["s3://b/p/x/", "s3://b/p/x/y/1"]) == "s3://b/p/x/"


@given(st.lists(st.text(alphabet="ab/", min_size=1, max_size=8), min_size=1, max_size=6))
def test_common_dir_is_a_directory_above_every_url(keys: list[str]) -> None:
    urls = [ROOT + k for k in keys]
    d = common_dir(urls)
    assert d.endswith("/") and d.startswith(ROOT)
    assert all(u.startswith(d) for u in urls)


@given(st.lists(st.integers(0, 30), min_size=1, max_size=60), st.integers(1, 8))
def test_fewer_distinct_opens_than_the_threshold_never_start_a_warm_up(opened: list[int], opens: int) -> None:
    p = WarmupPolicy(PolicySettings(opens=opens, window_seconds=1e9), None, ROOT, Clock())
    decisions = [p.cold_open(f"{ROOT}d/{i}", always) for i in opened]
    first = next((n for n, d in enumerate(decisions) if d is not None), None)
    if len(set(opened)) < opens:
        assert first is None
    else:
        assert first is not None and len(set(opened[: first + 1])) == opens
