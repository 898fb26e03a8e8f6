"""Culling policy (hub_ext.core.culling): rules, precedence, policy resolution, pressure reclaim.

What a user would notice: a training run killed because nobody had the browser open, a demo server
an admin marked persistent gone, a waiting student refused although idle GPU servers sat there, or
more servers culled for one waiting student than were needed.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.culling import (
    BUSY_GPU,
    BUSY_KERNEL,
    CULL,
    CULL_REASONS,
    DEFAULT_POLICY,
    IDLE,
    KEEP,
    KEEP_REASONS,
    NEVER_CULL,
    NOT_IDLE_YET,
    PERSISTENT,
    RECLAIM_FOR_PRESSURE,
    RESERVED_WINDOW,
    TOO_OLD,
    WARN,
    WARNED,
    CullPolicy,
    ServerFacts,
    Window,
    active_window,
    decide,
    format_duration,
    idle_since,
    resolve_policy,
    resolve_policy_key,
)

pytestmark = pytest.mark.unit

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def server(user="alice", *, idle=0.0, age=None, name="", **kw) -> ServerFacts:
    age = idle if age is None else age
    kw.setdefault("last_activity", ago(idle))
    return ServerFacts(user=user, server_name=name, started_at=ago(age), **kw)


def one(f: ServerFacts, policy: CullPolicy | None = None, pressure=None):
    policies = {} if policy is None else {(None, None): policy}
    (d,) = decide([f], policies, NOW, pressure)
    return d


P = CullPolicy(idle_timeout=1800, max_age=8 * 3600, pressure_min_idle=300)


# --- the rules of one server ---------------------------------------------------------------------


def test_idle_past_timeout_is_culled():
    d = one(server(idle=1800), P)
    assert d.cull and d.reason == IDLE and bool(d)
    assert "idle for 30 min" in d.message and "site default" in d.message


def test_idle_under_timeout_is_kept_with_cull_at():
    d = one(server(idle=1799, age=3600), P)
    assert not d.cull and d.reason == NOT_IDLE_YET
    assert d.cull_at == ago(1799) + timedelta(seconds=1800)
    assert d.idle_seconds == pytest.approx(1799)


def test_cull_at_is_max_age_when_that_comes_first():
    d = one(server(idle=0, age=8 * 3600 - 60), P)
    assert d.reason == NOT_IDLE_YET and d.cull_at == NOW + timedelta(seconds=60)


def test_too_old_is_culled_even_when_recently_active():
    d = one(server(idle=0, age=8 * 3600), P)
    assert d.cull and d.reason == TOO_OLD and "maximum age of 8 h" in d.message


def test_no_max_age_means_no_age_limit():
    d = one(server(idle=0, age=100 * 86400), CullPolicy(idle_timeout=60))
    assert d.reason == NOT_IDLE_YET


def test_too_old_wins_over_idle():
    assert one(server(idle=9 * 3600), P).reason == TOO_OLD


def test_persistent_never_culled_even_too_old_and_idle():
    d = one(server(idle=30 * 86400, persistent=True), P)
    assert not d.cull and d.reason == PERSISTENT and d.cull_at is None


def test_never_cull_policy():
    d = one(server(idle=30 * 86400), CullPolicy(idle_timeout=1, max_age=1, never_cull=True))
    assert not d.cull and d.reason == NEVER_CULL


def test_busy_kernel_with_idle_browser_is_kept():
    d = one(server(idle=5 * 3600, busy_kernels=2), P)
    assert not d.cull and d.reason == BUSY_KERNEL and "2 busy kernels" in d.message


def test_busy_kernel_is_kept_past_max_age():
    assert one(server(idle=0, age=10 * 3600, busy_kernels=1), P).reason == BUSY_KERNEL


def test_busy_gpu_flag_with_idle_browser_is_kept():
    d = one(server(idle=5 * 3600, gpu_busy=True), P)
    assert not d.cull and d.reason == BUSY_GPU


@pytest.mark.parametrize(("util", "reason"), [(4.9, IDLE), (5.0, BUSY_GPU), (97.0, BUSY_GPU), (0, IDLE)])
def test_gpu_utilisation_threshold(util, reason):
    assert one(server(idle=3600, age=3600, gpu_utilization=util), P).reason == reason


def test_gpu_busy_false_but_utilisation_high_is_busy():
    assert one(server(idle=3600, age=3600, gpu_busy=False, gpu_utilization=80), P).reason == BUSY_GPU


def test_gpu_utilisation_threshold_is_per_policy():
    pol = CullPolicy(idle_timeout=60, gpu_busy_utilization=50)
    assert one(server(idle=3600, gpu_utilization=40), pol).reason == IDLE
    assert one(server(idle=3600, gpu_utilization=50), pol).reason == BUSY_GPU


def test_precedence_persistent_over_never_cull_over_busy():
    pol = CullPolicy(idle_timeout=1, never_cull=True)
    f = server(idle=99, persistent=True, busy_kernels=1, gpu_busy=True)
    assert one(f, pol).reason == PERSISTENT
    assert one(server(idle=99, busy_kernels=1, gpu_busy=True), pol).reason == NEVER_CULL
    assert one(server(idle=99, busy_kernels=1, gpu_busy=True), P).reason == BUSY_KERNEL


def test_kernel_activity_counts_as_activity():
    f = server(idle=7200, age=7200, last_kernel_activity=ago(60))
    assert idle_since(f) == ago(60)
    assert one(f, P).reason == NOT_IDLE_YET


def test_no_hub_activity_uses_start_time():
    f = ServerFacts(user="a", started_at=ago(2000), last_activity=None)
    assert idle_since(f) == ago(2000) and one(f, P).reason == IDLE


def test_activity_in_the_future_counts_as_zero_idle():
    d = one(ServerFacts(user="a", started_at=ago(10), last_activity=NOW + timedelta(seconds=30)), P)
    assert d.idle_seconds == 0 and d.reason == NOT_IDLE_YET


def test_zero_timeout_culls_at_once():
    assert one(server(idle=0), CullPolicy(idle_timeout=0)).reason == IDLE


def test_default_policy_when_no_policies():
    assert one(server(idle=DEFAULT_POLICY.idle_timeout)).reason == IDLE
    assert one(server(idle=DEFAULT_POLICY.idle_timeout - 1)).reason == NOT_IDLE_YET


def test_named_server_label_in_message():
    assert "bob's server 'train'" in one(server("bob", name="train", idle=9999), P).message


# --- policy resolution ----------------------------------------------------------------------------

A, B, C, D = (CullPolicy(idle_timeout=t) for t in (1, 2, 3, 4))
ALL = {("a100", "ml101"): A, ("a100", None): B, (None, "ml101"): C, (None, None): D}


@pytest.mark.parametrize(
    ("profile", "course", "drop", "expect"),
    [
        ("a100", "ml101", [], A),
        ("a100", "ml101", [("a100", "ml101")], B),
        ("a100", "ml101", [("a100", "ml101"), ("a100", None)], C),
        ("a100", "ml101", [("a100", "ml101"), ("a100", None), (None, "ml101")], D),
        ("a100", "ml101", list(ALL), DEFAULT_POLICY),
        ("a100", "other", [], B),
        ("cpu", "ml101", [], C),
        ("cpu", "other", [], D),
        ("a100", None, [], B),
        ("cpu", None, [], D),
        ("cpu", None, [("a100", None), (None, None)], DEFAULT_POLICY),
    ],
)
def test_resolution_order(profile, course, drop, expect):
    pols = {k: v for k, v in ALL.items() if k not in drop}
    f = ServerFacts(user="u", started_at=NOW, profile=profile, course=course)
    assert resolve_policy(f, pols) is expect


def test_course_policy_does_not_apply_to_server_without_course():
    f = ServerFacts(user="u", started_at=NOW, profile="cpu", course=None)
    assert resolve_policy_key(f, {(None, None): D, (None, "ml101"): C}) == (None, None)
    assert resolve_policy_key(f, {}) is None


def test_decision_names_the_policy_that_applied():
    f = server(idle=10, profile="a100", course="ml101")
    (d,) = decide([f], ALL, NOW)
    assert d.policy_key == ("a100", "ml101") and "profile 'a100' in course 'ml101'" in d.message
    (d,) = decide([f], {(None, "ml101"): C}, NOW)
    assert d.policy_key == (None, "ml101") and "course 'ml101'" in d.message
    (d,) = decide([f], {}, NOW)
    assert d.policy_key == (None, None)


# --- pressure reclaim -----------------------------------------------------------------------------

LONG = CullPolicy(idle_timeout=3600, pressure_min_idle=300)


def gpu_server(user, idle, units=1, res=GPU, **kw):
    return server(user, idle=idle, resources={res: units}, **kw)


def culled(decisions):
    return [d.user for d in decisions if d.cull]


def test_pressure_reclaims_longest_idle_first_and_stops():
    fs = [gpu_server("a", 400), gpu_server("b", 1000), gpu_server("c", 700), gpu_server("d", 2000)]
    ds = decide(fs, {(None, None): LONG}, NOW, {GPU: 2})
    assert culled(ds) == ["b", "d"]
    by = {d.user: d for d in ds}
    assert by["d"].rank == 1 and by["b"].rank == 2 and by["d"].resource == GPU
    assert by["d"].reason == RECLAIM_FOR_PRESSURE and "reclaim capacity" in by["d"].message
    assert by["a"].reason == by["c"].reason == NOT_IDLE_YET


def test_pressure_respects_min_idle():
    fs = [gpu_server("a", 299), gpu_server("b", 300)]
    assert culled(decide(fs, {(None, None): LONG}, NOW, {GPU: 2})) == ["b"]


def test_min_idle_is_per_policy():
    fs = [gpu_server("a", 100, profile="mig"), gpu_server("b", 200, profile="gpu")]
    pols = {("mig", None): CullPolicy(pressure_min_idle=60), ("gpu", None): CullPolicy(pressure_min_idle=600)}
    assert culled(decide(fs, pols, NOW, {GPU: 2})) == ["a"]


def test_pressure_only_reclaims_holders_of_missing_resource():
    fs = [gpu_server("a", 3000, res=MIG), gpu_server("b", 500), server("c", idle=3000)]
    assert culled(decide(fs, {(None, None): LONG}, NOW, {GPU: 1})) == ["b"]


def test_pressure_never_reclaims_busy_persistent_or_exempt():
    fs = [
        gpu_server("a", 3000, busy_kernels=1),
        gpu_server("b", 3000, gpu_busy=True),
        gpu_server("c", 3000, persistent=True),
        gpu_server("d", 3000, profile="demo"),
        gpu_server("e", 3000, gpu_utilization=50),
    ]
    pols = {(None, None): LONG, ("demo", None): CullPolicy(never_cull=True)}
    ds = decide(fs, pols, NOW, {GPU: 5})
    assert culled(ds) == []
    assert [d.reason for d in ds] == [BUSY_KERNEL, BUSY_GPU, PERSISTENT, NEVER_CULL, BUSY_GPU]


def test_routine_culls_count_towards_shortage():
    fs = [gpu_server("a", 4000), gpu_server("b", 1000)]
    ds = decide(fs, {(None, None): LONG}, NOW, {GPU: 1})
    assert [(d.user, d.reason) for d in ds if d.cull] == [("a", IDLE)]
    ds = decide(fs, {(None, None): LONG}, NOW, {GPU: 2})
    assert [(d.user, d.reason) for d in ds if d.cull] == [("a", IDLE), ("b", RECLAIM_FOR_PRESSURE)]


def test_too_old_culls_count_towards_shortage():
    fs = [gpu_server("a", 0, age=10 * 3600), gpu_server("b", 1000)]
    ds = decide(fs, {(None, None): P}, NOW, {GPU: 1})
    assert [(d.user, d.reason) for d in ds if d.cull] == [("a", TOO_OLD)]


def test_last_server_may_overshoot_only_once():
    fs = [gpu_server("a", 900, units=4), gpu_server("b", 800, units=1)]
    ds = decide(fs, {(None, None): LONG}, NOW, {GPU: 2})
    assert culled(ds) == ["a"]


def test_shortage_larger_than_reclaimable_takes_all_candidates():
    fs = [gpu_server("a", 900), gpu_server("b", 800), gpu_server("c", 10)]
    assert culled(decide(fs, {(None, None): LONG}, NOW, {GPU: 10})) == ["a", "b"]


def test_multi_resource_reclaim_counts_server_once():
    both = server("a", idle=2000, resources={GPU: 1, MIG: 1})
    fs = [both, gpu_server("b", 1000, res=MIG), gpu_server("c", 1500)]
    ds = decide(fs, {(None, None): LONG}, NOW, {GPU: 1, MIG: 1})
    assert culled(ds) == ["a"]
    assert ds[0].resource == GPU and ds[0].rank == 1


def test_resources_processed_in_name_order():
    fs = [gpu_server("a", 1000, res=MIG), gpu_server("b", 2000)]
    ds = decide(fs, {(None, None): LONG}, NOW, {MIG: 1, GPU: 1})
    by = {d.user: d for d in ds}
    assert by["b"].rank == 1 and by["b"].resource == GPU and by["a"].rank == 2 and by["a"].resource == MIG


def test_ties_broken_by_user_then_server_name():
    fs = [gpu_server("b", 1000), gpu_server("a", 1000, name="z"), gpu_server("a", 1000, name="y")]
    ds = decide(fs, {(None, None): LONG}, NOW, {GPU: 2})
    assert [(d.user, d.server_name) for d in ds if d.cull] == [("a", "y"), ("a", "z")]


@pytest.mark.parametrize("pressure", [None, {}, {GPU: 0}])
def test_no_pressure_no_reclaim(pressure):
    assert culled(decide([gpu_server("a", 3000)], {(None, None): LONG}, NOW, pressure)) == []


# --- validation and small helpers -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"idle_timeout": -1},
        {"idle_timeout": float("nan")},
        {"idle_timeout": True},
        {"max_age": -5},
        {"pressure_min_idle": float("inf")},
        {"gpu_busy_utilization": 101},
    ],
)
def test_bad_policy_rejected(kw):
    with pytest.raises(ValueError):
        CullPolicy(**kw)


@pytest.mark.parametrize(
    "kw",
    [{"resources": {GPU: -1}}, {"resources": {GPU: 1.5}}, {"busy_kernels": -1}, {"gpu_utilization": 120}],
)
def test_bad_facts_rejected(kw):
    with pytest.raises(ValueError):
        ServerFacts(user="u", started_at=NOW, **kw)


def test_facts_resources_normalised_and_hashable():
    f = ServerFacts(user="u", started_at=NOW, resources={MIG: 1, GPU: 2, "cpu": 0})
    assert f.resources == ((GPU, 2), (MIG, 1)) and f.held(GPU) == 2 and f.held("x") == 0
    assert hash(f) == hash(ServerFacts(user="u", started_at=NOW, resources=[(GPU, 2), (MIG, 1)]))


def test_bad_pressure_and_duplicates_rejected():
    with pytest.raises(ValueError):
        decide([], {}, NOW, {GPU: -1})
    with pytest.raises(ValueError, match="duplicate"):
        decide([server("a"), server("a")], {}, NOW)


@pytest.mark.parametrize(
    ("s", "text"), [(0, "0 s"), (59, "59 s"), (60, "1 min"), (3600, "1 h"), (3900, "1 h 5 min"),
                    (86400, "1 d"), (90000, "1 d 1 h"), (-5, "0 s")]
)
def test_format_duration(s, text):
    assert format_duration(s) == text


def test_reason_sets_partition():
    assert not CULL_REASONS & KEEP_REASONS
    assert {IDLE, TOO_OLD, RECLAIM_FOR_PRESSURE} == CULL_REASONS


# --- properties ------------------------------------------------------------------------------------

RES = [GPU, MIG, "nvidia.com/gpu.shared"]

facts_st = st.builds(
    lambda user, name, idle, extra_age, busy, gpu_busy, util, persistent, profile, res: ServerFacts(
        user=user, server_name=name, started_at=ago(idle + extra_age), last_activity=ago(idle),
        busy_kernels=busy, gpu_busy=gpu_busy, gpu_utilization=util, persistent=persistent,
        profile=profile, resources=res,
    ),
    st.sampled_from(["ann", "bob", "cy", "dee", "eve"]),
    st.sampled_from(["", "a", "b"]),
    st.integers(0, 20_000),
    st.integers(0, 40_000),
    st.sampled_from([0, 0, 0, 1]),
    st.sampled_from([None, None, False, True]),
    st.one_of(st.none(), st.floats(0, 100)),
    st.booleans(),
    st.sampled_from(["cpu", "mig", "gpu", "demo"]),
    st.dictionaries(st.sampled_from(RES), st.integers(0, 3), max_size=3),
)
servers_st = st.lists(facts_st, max_size=12, unique_by=lambda f: f.key)
policies_st = st.dictionaries(
    st.sampled_from([(None, None), ("gpu", None), ("mig", None), ("demo", None)]),
    st.builds(
        CullPolicy,
        idle_timeout=st.integers(0, 10_000),
        max_age=st.one_of(st.none(), st.integers(0, 50_000)),
        never_cull=st.booleans(),
        pressure_min_idle=st.integers(0, 5_000),
        gpu_busy_utilization=st.floats(0, 100),
    ),
)
pressure_st = st.one_of(st.none(), st.dictionaries(st.sampled_from(RES), st.integers(0, 6), max_size=3))


def _busy(f: ServerFacts, policies) -> bool:
    pol = resolve_policy(f, policies)
    util_busy = f.gpu_utilization is not None and f.gpu_utilization >= pol.gpu_busy_utilization
    return f.busy_kernels > 0 or bool(f.gpu_busy) or util_busy


@settings(max_examples=300, deadline=None)
@given(servers_st, policies_st, pressure_st)
def test_never_culls_persistent_busy_or_exempt(fs, policies, pressure):
    ds = decide(fs, policies, NOW, pressure)
    assert len(ds) == len(fs)
    for f, d in zip(sorted(fs, key=lambda f: f.key), ds, strict=True):
        assert (d.user, d.server_name) == f.key
        assert d.reason in (CULL_REASONS if d.cull else KEEP_REASONS)
        if f.persistent or _busy(f, policies) or resolve_policy(f, policies).never_cull:
            assert not d.cull


@settings(max_examples=300, deadline=None)
@given(servers_st, policies_st, pressure_st)
def test_pressure_reclaims_no_more_than_needed(fs, policies, pressure):
    ds = decide(fs, policies, NOW, pressure)
    by = {f.key: f for f in fs}
    shortage = {k: v for k, v in (pressure or {}).items() if v}
    routine = [by[(d.user, d.server_name)] for d in ds if d.cull and d.reason != RECLAIM_FOR_PRESSURE]
    reclaims = sorted((d for d in ds if d.reason == RECLAIM_FOR_PRESSURE), key=lambda d: d.rank)
    assert [d.rank for d in reclaims] == list(range(1, len(reclaims) + 1))
    if not shortage:
        assert not reclaims
    freed_before = {r: sum(f.held(r) for f in routine) for r in shortage}
    for d in reclaims:
        f = by[(d.user, d.server_name)]
        pol = resolve_policy(f, policies)
        # each reclaim was needed when chosen: its resource was still short, and it holds some
        assert d.resource in shortage and f.held(d.resource) > 0
        assert freed_before[d.resource] < shortage[d.resource]
        assert d.idle_seconds >= pol.pressure_min_idle and d.idle_seconds < pol.idle_timeout
        for r in shortage:
            freed_before[r] += f.held(r)
    # within one resource, longest idle first
    for r in shortage:
        idles = [d.idle_seconds for d in reclaims if d.resource == r]
        assert idles == sorted(idles, reverse=True)
        # a kept candidate holding r that was passed over means r is covered
        if any(
            not d.cull and d.reason == NOT_IDLE_YET and by[(d.user, d.server_name)].held(r)
            and d.idle_seconds >= resolve_policy(by[(d.user, d.server_name)], policies).pressure_min_idle
            for d in ds
        ):
            assert freed_before[r] >= shortage[r]


@settings(max_examples=200, deadline=None)
@given(servers_st, policies_st, pressure_st, st.randoms(use_true_random=False))
def test_deterministic_whatever_the_input_order(fs, policies, pressure, rnd: random.Random):
    first = decide(fs, policies, NOW, pressure)
    shuffled = list(fs)
    rnd.shuffle(shuffled)
    assert decide(shuffled, policies, NOW, pressure) == first
    assert decide(fs, policies, NOW, pressure) == first


# --- reserved windows, warnings, per-course overrides: the decision table ------------------------

EXAM = Window("cs101", ago(600), NOW + timedelta(hours=2), "final exam")
W = CullPolicy(idle_timeout=1800, max_age=8 * 3600, pressure_min_idle=300, warn_before=600)


def table(f: ServerFacts, policies=None, pressure=None, windows=()):
    policies = {(None, None): P} if policies is None else policies
    (d,) = decide([f], policies, NOW, pressure, windows)
    return d


@pytest.mark.parametrize(
    "facts, windows, expect",
    [
        # persistent + over max age + idle: persistent wins
        (dict(idle=10 * 3600, persistent=True), (), (KEEP, PERSISTENT)),
        # persistent inside a window: still "persistent" (the stronger reason)
        (dict(idle=10 * 3600, persistent=True, course="cs101"), (EXAM,), (KEEP, PERSISTENT)),
        # busy GPU + idle browser
        (dict(idle=5000, gpu_utilization=93.0), (), (KEEP, BUSY_GPU)),
        # busy kernel + idle browser + over max age
        (dict(idle=9 * 3600, busy_kernels=2), (), (KEEP, BUSY_KERNEL)),
        # idle past timeout, inside its course's exam window
        (dict(idle=5000, course="cs101"), (EXAM,), (KEEP, RESERVED_WINDOW)),
        # over max age inside the window
        (dict(idle=10, age=9 * 3600, course="cs101"), (EXAM,), (KEEP, RESERVED_WINDOW)),
        # another course's window does not protect
        (dict(idle=5000, course="cs102"), (EXAM,), (CULL, IDLE)),
        # no course: no window applies
        (dict(idle=5000), (EXAM,), (CULL, IDLE)),
        # a window that is over, or not begun, does not protect
        (dict(idle=5000, course="cs101"), (Window("cs101", ago(7200), ago(3600)),), (CULL, IDLE)),
        (dict(idle=5000, course="cs101"), (Window("cs101", NOW + timedelta(seconds=1),
                                                  NOW + timedelta(hours=1)),), (CULL, IDLE)),
        # the window's end is exclusive
        (dict(idle=5000, course="cs101"), (Window("cs101", ago(60), NOW),), (CULL, IDLE)),
    ],
)
def test_decision_table(facts, windows, expect):
    d = table(server(**facts), windows=windows)
    assert (d.action, d.reason) == expect
    assert d.reason in (CULL_REASONS if d.cull else KEEP_REASONS)


def test_window_sets_cull_at_to_its_end_and_names_the_exam():
    d = table(server(idle=5000, course="cs101"), windows=(EXAM,))
    assert d.cull_at == EXAM.end
    assert "final exam" in d.message and "cs101" in d.message
    kept = table(server(idle=60, course="cs101"), windows=(EXAM,))
    assert kept.reason == RESERVED_WINDOW and kept.cull_at == EXAM.end


def test_window_protects_from_pressure_reclaim():
    f = server(idle=1000, course="cs101", resources={GPU: 1})
    assert table(f, pressure={GPU: 1}, windows=(EXAM,)).reason == RESERVED_WINDOW
    assert table(f, pressure={GPU: 1}).reason == RECLAIM_FOR_PRESSURE


def test_active_window_picks_the_latest_end_of_the_course():
    later = Window("cs101", ago(60), NOW + timedelta(hours=5))
    assert active_window("cs101", [EXAM, later], NOW) == later
    assert active_window(None, [EXAM], NOW) is None
    with pytest.raises(ValueError, match="end after"):
        Window("cs101", NOW, NOW)


def test_warning_comes_before_an_idle_cull():
    # past the timeout, never warned: warn now, cull in warn_before
    d = table(server(idle=5000), {(None, None): W})
    assert (d.action, d.reason, d.cull_at) == (WARN, WARNED, NOW + timedelta(seconds=600))
    assert "will be culled in about 10 min" in d.message
    # warned 5 minutes ago: still a warning, with the same deadline
    d = table(server(idle=5000, warned_at=ago(300)), {(None, None): W})
    assert (d.action, d.cull_at) == (WARN, NOW + timedelta(seconds=300))
    # warned 10 minutes ago: culled
    d = table(server(idle=5000, warned_at=ago(600)), {(None, None): W})
    assert (d.action, d.reason) == (CULL, IDLE)


def test_warning_before_max_age_cull():
    d = table(server(idle=10, age=9 * 3600), {(None, None): W})
    assert (d.action, d.reason) == (WARN, WARNED)
    d = table(server(idle=10, age=9 * 3600, warned_at=ago(601)), {(None, None): W})
    assert (d.action, d.reason) == (CULL, TOO_OLD)


def test_warning_when_the_cull_is_near():
    # 1800 s timeout, idle 1300 s: the cull is 500 s away, inside the 600 s warning
    d = table(server(idle=1300), {(None, None): W})
    assert (d.action, d.cull_at) == (WARN, NOW + timedelta(seconds=500))
    # idle 1000 s: 800 s away, no warning yet
    d = table(server(idle=1000), {(None, None): W})
    assert (d.action, d.reason) == (KEEP, NOT_IDLE_YET)


def test_no_warning_for_busy_persistent_or_when_disabled():
    for f in (server(idle=5000, busy_kernels=1), server(idle=5000, persistent=True),
              server(idle=5000, gpu_busy=True)):
        assert table(f, {(None, None): W}).action == KEEP
    assert table(server(idle=5000)).action == CULL  # P has warn_before 0


def test_pressure_reclaim_does_not_wait_for_the_warning():
    f = server(idle=5000, resources={GPU: 1})
    d = table(f, {(None, None): W}, pressure={GPU: 1})
    assert (d.action, d.reason) == (CULL, RECLAIM_FOR_PRESSURE)


def test_per_course_override_of_a_kind():
    policies = {
        ("gpu", None): CullPolicy(idle_timeout=1800),
        ("gpu", "thesis"): CullPolicy(idle_timeout=4 * 3600),
        (None, "demo"): CullPolicy(never_cull=True),
    }
    assert table(server(idle=3600, profile="gpu"), policies).action == CULL
    d = table(server(idle=3600, profile="gpu", course="thesis"), policies)
    assert d.action == KEEP and d.policy_key == ("gpu", "thesis")
    assert table(server(idle=3600, profile="gpu", course="demo"), policies).action == CULL
    assert table(server(idle=3600, profile="cpu", course="demo"), policies).reason == NEVER_CULL


def test_bad_warn_before_rejected():
    with pytest.raises(ValueError, match="warn_before"):
        CullPolicy(warn_before=-1)
