"""Quota admission (hub_ext.core.quota): limits, usage, the admit decision and its messages.

What a user would notice: a student refused although the course had room (or admitted past the
ceiling, so a classmate's GPU is gone), a refusal that does not say which limit bound, a teacher
allowed to give one student more than the whole course.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub_ext.core.quota import (
    ALLOWED,
    COURSE_GPU_HOURS,
    COURSE_RESOURCE,
    COURSE_SERVERS,
    USER_GPU_HOURS,
    USER_RESOURCE,
    USER_SERVERS,
    Decision,
    Limits,
    Usage,
    admit,
    ceiling_violations,
    gpu_amount,
    gpu_seconds,
    parse_limits,
    week_window,
    within_ceiling,
)
from hub_ext.core.resources import ZERO, ResourceVector, human_quantity

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.18gb"
SHARED = "nvidia.com/gpu.shared"
UTC = timezone.utc


def R(**kw: object) -> ResourceVector:
    """ResourceVector with python-friendly names: gpu, mig, shared, cpu, memory."""
    names = {"gpu": GPU, "mig": MIG, "shared": SHARED}
    return ResourceVector({names.get(k, k): v for k, v in kw.items()})


NO_LIMITS = (Limits(), Usage())


# --------------------------------------------------------------------------- Limits


def test_missing_resource_means_no_limit_and_zero_means_none_allowed() -> None:
    limits = parse_limits({"resources": {GPU: 0, "cpu": "2"}})
    assert limits.ceiling(GPU) == 0
    assert limits.ceiling("cpu") == 2
    assert limits.ceiling("memory") is None
    assert limits.limited == {GPU, "cpu"}
    assert limits.zero == {GPU}


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"resources": R(gpu=1), "zero": frozenset({GPU})}, "both capped"),
        ({"resources": -R(gpu=1)}, "negative"),
        ({"servers": -1}, "servers"),
        ({"servers": True}, "servers"),
        ({"servers": 1.0}, "servers"),
        ({"gpu_hours_per_week": Fraction(-1)}, "gpu_hours_per_week"),
        ({"gpu_hours_per_week": 1.5}, "gpu_hours_per_week"),
    ],
)
def test_limits_refuse_invalid_values(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Limits(**kwargs)


def test_parse_limits_full_and_round_trip() -> None:
    data = {
        "resources": {"cpu": "500m", "memory": "8Gi", GPU: 4, MIG: "0"},
        "servers": 20,
        "gpu_hours_per_week": 10.5,
    }
    limits = parse_limits(data)
    assert limits.resources == R(cpu="500m", memory="8Gi", gpu=4)
    assert limits.zero == {MIG}
    assert limits.servers == 20
    assert limits.gpu_hours_per_week == Fraction(21, 2)
    assert limits.to_dict() == {
        "resources": {"cpu": "500m", "memory": "8Gi", GPU: "4", MIG: "0"},
        "servers": 20,
        "gpu_hours_per_week": "10.5",
    }
    assert parse_limits(limits.to_dict()) == limits


def test_parse_limits_nulls_and_empty_mean_unlimited() -> None:
    assert parse_limits({}) == Limits()
    assert parse_limits({"resources": None, "servers": None, "gpu_hours_per_week": None}) == Limits()
    assert parse_limits({"resources": {GPU: None}}) == Limits()


def test_parse_limits_exact_hours() -> None:
    assert parse_limits({"gpu_hours_per_week": 0.1}).gpu_hours_per_week == Fraction(1, 10)
    assert parse_limits({"gpu_hours_per_week": "1/3"}).gpu_hours_per_week == Fraction(1, 3)
    assert parse_limits({"gpu_hours_per_week": "1/3"}).to_dict()["gpu_hours_per_week"] == "1/3"
    assert parse_limits({"servers": 2.0}).servers == 2
    assert parse_limits({"gpu_hours_per_week": Fraction(1, 3)}).gpu_hours_per_week == Fraction(1, 3)


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"gpus": 4}, "unknown limit 'gpus'"),
        ({"resources": {GPU: -1}}, f"{GPU} must not be negative"),
        ({"resources": {"cpu": "-500m"}}, "cpu must not be negative"),
        ({"resources": {GPU: "four"}}, GPU),
        ({"resources": {GPU: True}}, "not a number"),
        ({"resources": {GPU: [1]}}, "not a number"),
        ({"resources": {"nvidia.com/GPU ": 1}}, "not a valid resource name"),
        ({"resources": [GPU]}, "resources must be an object"),
        ({"servers": -1}, "servers: -1 must not be negative"),
        ({"servers": "2"}, "servers: '2' is not a whole number"),
        ({"servers": 2.5}, "not a whole number"),
        ({"servers": False}, "not a whole number"),
        ({"gpu_hours_per_week": -3}, "gpu_hours_per_week: -3 must not be negative"),
        ({"gpu_hours_per_week": "ten"}, "gpu_hours_per_week: 'ten' is not a number"),
        ({"gpu_hours_per_week": "1/0"}, "is not a number"),
        ({"gpu_hours_per_week": True}, "is not a number"),
        ({"gpu_hours_per_week": float("nan")}, "is not a number"),
    ],
)
def test_parse_limits_rejects_with_clear_reason(data: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        parse_limits(data)


def test_parse_limits_rejects_non_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        parse_limits([1, 2])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- ceilings


def test_within_ceiling_accepts_lower_equal_and_unset() -> None:
    course = parse_limits({"resources": {GPU: 4, "cpu": 8}, "servers": 20, "gpu_hours_per_week": 10})
    assert within_ceiling(parse_limits({"resources": {GPU: 4, "cpu": 2}, "servers": 20}), course)
    assert within_ceiling(Limits(), course)
    # the course does not cap memory: a student memory limit is fine at any size
    assert within_ceiling(parse_limits({"resources": {"memory": "1Ti"}}), course)
    assert within_ceiling(parse_limits({"resources": {GPU: 0}}), course)


def test_ceiling_violations_name_each_excess() -> None:
    course = parse_limits({"resources": {GPU: 4, MIG: 0}, "servers": 20, "gpu_hours_per_week": "10.5"})
    student = parse_limits(
        {"resources": {GPU: 5, MIG: 1}, "servers": 21, "gpu_hours_per_week": 11}
    )
    assert not within_ceiling(student, course)
    assert ceiling_violations(student, course) == [
        f"5 {GPU} per student is above the course ceiling of 4 {GPU}",
        f"1 {MIG} per student is above the course ceiling of 0 {MIG}",
        "21 servers per student is above the course ceiling of 20",
        "11 GPU hours per week per student is above the course ceiling of 10.5",
    ]


# --------------------------------------------------------------------------- admit: examples


def course_of(limits: dict, *, resources: ResourceVector = ZERO, servers: int = 0,
              hours: Fraction = Fraction(0)) -> tuple[Limits, Usage]:
    return parse_limits(limits), Usage(resources, servers, hours)


def test_course_gpu_ceiling_message_quotes_user_share() -> None:
    decision = admit(
        R(gpu=1),
        course_of({"resources": {GPU: 1}}, resources=R(gpu=1), servers=1),
        course_of({"resources": {GPU: 4}}, resources=R(gpu=4), servers=4),
        "CS101",
    )
    assert decision == Decision(
        False,
        COURSE_RESOURCE,
        "Course CS101 uses 4 of its 4 nvidia.com/gpu (you: 1 of 1). Stop a server or ask your teacher.",
    )
    assert not decision


def test_course_message_without_user_limit_and_with_partial_room() -> None:
    decision = admit(
        R(memory="4Gi"),
        (Limits(), Usage()),
        course_of({"resources": {"memory": "8Gi"}}, resources=R(memory="6Gi")),
        "CS101",
    )
    assert decision.reason_code == COURSE_RESOURCE
    assert decision.message == (
        "Course CS101 uses 6 GiB of its 8 GiB memory and this asks for 4 GiB (you: 0 B). "
        "Stop a server or ask your teacher."
    )


def test_user_servers_message() -> None:
    decision = admit(R(cpu=1), course_of({"servers": 2}, servers=2), None, "CS101")
    assert decision == Decision(
        False, USER_SERVERS, "You already run 2 of your 2 servers. Stop a server first."
    )


def test_course_servers_message() -> None:
    decision = admit(R(cpu=1), course_of({"servers": 3}, servers=1),
                     course_of({"servers": 30}, servers=30), "CS101")
    assert decision == Decision(
        False, COURSE_SERVERS,
        "Course CS101 already runs 30 of its 30 servers (you: 1 of 3). Stop a server or ask your teacher.",
    )


def test_user_resource_messages() -> None:
    decision = admit(R(cpu="1.6"), course_of({"resources": {"cpu": 2}}, resources=R(cpu="0.5")), None, "X")
    assert decision == Decision(
        False, USER_RESOURCE,
        "You use 0.5 of your 2 CPU and this asks for 1.6. Stop a server or ask your teacher.",
    )
    decision = admit(R(mig=1), course_of({"resources": {MIG: 0}}), None, "X")
    assert decision == Decision(
        False, USER_RESOURCE,
        f"You may not use {MIG}. Pick a profile without it or ask your teacher.",
    )


def test_course_zero_ceiling_message() -> None:
    decision = admit(R(gpu=1), NO_LIMITS, course_of({"resources": {GPU: 0}}), "ART1")
    assert decision.message == (
        f"Course ART1 does not allow {GPU} (you: 0). Pick a profile without it or ask your teacher."
    )


def test_gpu_hours_messages_and_cpu_still_allowed() -> None:
    user = course_of({"gpu_hours_per_week": 10}, hours=Fraction(10))
    decision = admit(R(shared=1), user, None, "CS101")
    assert decision == Decision(
        False, USER_GPU_HOURS,
        "You used 10 of your 10 GPU hours this week. CPU-only servers still start; "
        "ask your teacher for more GPU time.",
    )
    assert admit(R(cpu=4), user, None, "CS101") == ALLOWED
    course = course_of({"gpu_hours_per_week": "100"}, hours=Fraction(300001, 3000))
    decision = admit(R(mig=1), NO_LIMITS, course, "CS101")
    assert decision.reason_code == COURSE_GPU_HOURS
    assert decision.message.startswith("Course CS101 used ~100 of its 100 GPU hours this week.")
    # just under the limit: still admitted (hours are checked as "already used up")
    almost = course_of({"gpu_hours_per_week": "100"}, hours=Fraction(99999, 1000))
    assert admit(R(mig=1), NO_LIMITS, almost, "CS101") == ALLOWED


def test_exactly_reaching_a_limit_is_allowed() -> None:
    assert admit(
        R(gpu=1, cpu="500m"),
        course_of({"resources": {GPU: 1}, "servers": 1}),
        course_of({"resources": {GPU: 4, "cpu": 2}, "servers": 4}, resources=R(gpu=3, cpu="1.5"), servers=3),
        "CS101",
    ) == ALLOWED


def test_missing_limits_are_unlimited() -> None:
    huge = R(gpu=10**6, cpu=10**6, memory="1Ei")
    used = Usage(R(gpu=10**9), 10**6, Fraction(10**9))
    assert admit(huge, (Limits(), used), (Limits(), used), "CS101") == ALLOWED
    # a cap on GPUs says nothing about CPUs
    assert admit(R(cpu=64), NO_LIMITS, course_of({"resources": {GPU: 0}}), "CS101") == ALLOWED


def test_exceeded_limit_blocks_only_requests_for_that_resource() -> None:
    # the teacher lowered the GPU ceiling to 2 while 3 GPUs run
    course = course_of({"resources": {GPU: 2, "cpu": 8}}, resources=R(gpu=3, cpu=3))
    assert admit(R(cpu=1), NO_LIMITS, course, "CS101") == ALLOWED
    assert admit(R(gpu=1), NO_LIMITS, course, "CS101").reason_code == COURSE_RESOURCE


def test_jobs_do_not_count_as_servers() -> None:
    full = course_of({"servers": 1}, servers=1)
    assert admit(R(gpu=1), full, full, "CS101", servers=0) == ALLOWED
    assert admit(R(gpu=1), full, None, "CS101").reason_code == USER_SERVERS


def test_course_limits_are_reported_before_user_limits() -> None:
    user = course_of({"servers": 1, "resources": {GPU: 1}}, servers=1, resources=R(gpu=1))
    course = course_of({"servers": 1, "resources": {GPU: 1}}, servers=1, resources=R(gpu=1))
    assert admit(R(gpu=1), user, course, "CS101").reason_code == COURSE_SERVERS
    assert admit(R(gpu=1), user, None, "CS101").reason_code == USER_SERVERS


def test_invalid_requests_are_programming_errors() -> None:
    with pytest.raises(ValueError, match="negative"):
        admit(-R(gpu=1), NO_LIMITS, None, "CS101")
    with pytest.raises(ValueError, match="servers"):
        admit(R(gpu=1), NO_LIMITS, None, "CS101", servers=-1)


# --------------------------------------------------------------------------- admit: properties

NAMES = ["cpu", "memory", GPU, MIG, SHARED]
amounts = st.integers(min_value=0, max_value=6)
hours = st.fractions(min_value=0, max_value=20, max_denominator=3600)


@st.composite
def limits_st(draw: st.DrawFn) -> Limits:
    capped = draw(st.dictionaries(st.sampled_from(NAMES), amounts))
    return parse_limits(
        {
            "resources": {name: str(v) for name, v in capped.items()},
            "servers": draw(st.none() | st.integers(0, 4)),
            "gpu_hours_per_week": draw(st.none() | hours.map(str)),
        }
    )


@st.composite
def usage_st(draw: st.DrawFn) -> Usage:
    used = draw(st.dictionaries(st.sampled_from(NAMES), amounts))
    return Usage(ResourceVector(used), draw(st.integers(0, 5)), draw(hours))


requests_st = st.dictionaries(st.sampled_from(NAMES), st.integers(0, 4)).map(ResourceVector)


def _violations(request: ResourceVector, limits: Limits, usage: Usage, servers: int, who: str) -> set[str]:
    """Independent statement of the rule: which limits would `request` cross?"""
    found = set()
    if servers and limits.servers is not None and usage.servers + servers > limits.servers:
        found.add(f"{who}_servers")
    for name in request:
        cap = limits.ceiling(name)
        if cap is not None and usage.resources[name] + request[name] > cap:
            found.add(f"{who}_resource")
    if (limits.gpu_hours_per_week is not None and gpu_amount(request) > 0
            and usage.gpu_hours_week >= limits.gpu_hours_per_week):
        found.add(f"{who}_gpu_hours")
    return found


@settings(max_examples=250, deadline=None)
@given(request=requests_st, user_limits=limits_st(), user_usage=usage_st(),
       course_limits=limits_st(), course_usage=usage_st(), servers=st.integers(0, 1),
       has_course=st.booleans())
def test_admit_never_crosses_a_limit_and_never_refuses_without_one(
    request: ResourceVector, user_limits: Limits, user_usage: Usage, course_limits: Limits,
    course_usage: Usage, servers: int, has_course: bool,
) -> None:
    course = (course_limits, course_usage) if has_course else None
    decision = admit(request, (user_limits, user_usage), course, "CS101", servers=servers)
    crossed = _violations(request, user_limits, user_usage, servers, "user")
    if has_course:
        crossed |= _violations(request, course_limits, course_usage, servers, "course")
    if decision.allowed:
        assert not crossed
        # spelled out: every limited resource the request asks for stays within its ceiling
        for limits, usage in [(user_limits, user_usage)] + ([course] if course else []):
            for name in request:
                cap = limits.ceiling(name)
                assert cap is None or usage.resources[name] + request[name] <= cap
    else:
        assert decision.reason_code in crossed
        if decision.reason_code.startswith("course"):
            assert "Course CS101" in decision.message
        else:
            assert decision.message.startswith("You ")


@settings(max_examples=100, deadline=None)
@given(request=requests_st, user_usage=usage_st(), course_usage=usage_st())
def test_no_limits_admit_everything(request: ResourceVector, user_usage: Usage, course_usage: Usage) -> None:
    assert admit(request, (Limits(), user_usage), (Limits(), course_usage), "CS101") == ALLOWED


@settings(max_examples=150, deadline=None)
@given(request=requests_st, limits=limits_st(), usage=usage_st())
def test_refusal_messages_name_the_binding_limit(
    request: ResourceVector, limits: Limits, usage: Usage
) -> None:
    decision = admit(request, NO_LIMITS, (limits, usage), "CS101")
    if decision.reason_code == COURSE_SERVERS:
        assert f"of its {limits.servers} servers" in decision.message
    elif decision.reason_code == COURSE_RESOURCE:
        binding = next(
            n for n in request
            if limits.ceiling(n) is not None and usage.resources[n] + request[n] > limits.ceiling(n)
        )
        cap = limits.ceiling(binding)
        expected = f"does not allow {binding}" if cap == 0 else f"of its {human_quantity(binding, cap)}"
        assert expected in decision.message
    elif decision.reason_code == COURSE_GPU_HOURS:
        assert "GPU hours this week" in decision.message


@settings(max_examples=100, deadline=None)
@given(request=requests_st, limits=limits_st(), usage=usage_st(), extra=st.integers(0, 3))
def test_raising_a_limit_never_turns_admission_into_refusal(
    request: ResourceVector, limits: Limits, usage: Usage, extra: int
) -> None:
    before = admit(request, (limits, usage), None, "CS101")
    raised = parse_limits(
        {
            "resources": {n: str(limits.ceiling(n) + extra) for n in limits.limited},
            "servers": None if limits.servers is None else limits.servers + extra,
            "gpu_hours_per_week": None if limits.gpu_hours_per_week is None
            else str(limits.gpu_hours_per_week + extra),
        }
    )
    if before.allowed:
        assert admit(request, (raised, usage), None, "CS101").allowed


@settings(max_examples=100, deadline=None)
@given(limits=limits_st())
def test_parse_limits_round_trips(limits: Limits) -> None:
    assert parse_limits(limits.to_dict()) == limits


# --------------------------------------------------------------------------- GPU hours


def test_gpu_amount_counts_every_gpu_kind() -> None:
    assert gpu_amount(R(gpu=2, mig=3, shared=1, cpu=8, memory="1Gi")) == 6
    assert gpu_amount(ResourceVector({"nvidia.com/mig-3g.71gb": 1})) == 1
    assert gpu_amount(R(cpu=8)) == 0


def test_week_window_is_monday_to_monday() -> None:
    wednesday = datetime(2025, 3, 5, 14, 30, 12, 999, tzinfo=UTC)
    assert week_window(wednesday) == (
        datetime(2025, 3, 3, tzinfo=UTC), datetime(2025, 3, 10, tzinfo=UTC)
    )
    monday = datetime(2025, 3, 3, tzinfo=UTC)
    assert week_window(monday)[0] == monday


def test_gpu_seconds_clips_to_window_and_counts_held_until_now() -> None:
    start, end = datetime(2025, 3, 3, tzinfo=UTC), datetime(2025, 3, 10, tzinfo=UTC)
    intervals = [
        # 2 GPUs from Sunday 23:00 of the week before to Monday 00:00:30: 30 s inside x 2
        (start - timedelta(hours=1), start + timedelta(seconds=30), R(gpu=2)),
        # CPU only: no GPU seconds
        (start, end, R(cpu=8)),
        # still held since Sunday 23:59:00, now is Sunday 23:59:59.5: 59.5 s x 1
        (end - timedelta(minutes=1), None, R(mig=1)),
        # released before the window
        (start - timedelta(days=2), start - timedelta(days=1), R(gpu=1)),
    ]
    now = end - timedelta(microseconds=500_000)
    assert gpu_seconds(intervals, start, end, now) == 60 + Fraction(119, 2)
    # without `now`, a held reservation counts to the end of the window: 60 s
    assert gpu_seconds(intervals, start, end) == 60 + 60


def test_course_to_charge_picks_the_profiles_course_the_user_is_in():
    from hub_ext.core.quota import course_to_charge

    assert course_to_charge({"cs102", "cs101"}, ["cs101", "cs102", "art"]) == "cs101"
    assert course_to_charge({"cs102"}, ["cs101", "cs102"]) == "cs102"
    assert course_to_charge({"cs103"}, ["cs101"]) is None
    assert course_to_charge(set(), ["zz", "aa"]) == "aa"
    assert course_to_charge(set(), []) is None
