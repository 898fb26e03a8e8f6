"""Quota admission: may this request start, given a user's and a course's limits and usage?

Why a pure module: "no course can exceed its quota" is a promise to admins, and "why was I
refused?" is a question from students. Both are answered here from plain values, so the rule is
tested exhaustively (hypothesis) without a database, and the store only has to feed it a
consistent snapshot under a lock (hub_ext/store/ledger.py).

Value model:
- `Limits.resources` caps the resources it names. **A resource that `Limits` does not name is not
  limited.** Because a `ResourceVector` drops zero entries, a ceiling of zero ("this course gets no
  GPUs") is kept apart in `Limits.zero`; `Limits.ceiling(name)` hides the difference.
- `servers=None` / `gpu_hours_per_week=None` mean "no limit" as well.
- A limit that is already exceeded (a teacher lowered it while servers ran) only refuses requests
  that ask for more of that very resource; a CPU-only server is not refused because the course is
  over its GPU ceiling. A request never makes an exceeded limit worse, and never crosses one.
- GPU hours cannot be known in advance, so they are checked as "hours already used this week are
  below the limit" and only for requests that ask for a GPU resource of any kind.

Pure: standard library and hub_ext.core only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from hub_ext.core.resources import ZERO, ResourceVector, human_quantity, is_gpu_resource

__all__ = [
    "ALLOWED",
    "COURSE_GPU_HOURS",
    "COURSE_RESOURCE",
    "COURSE_SERVERS",
    "NOT_MEMBER",
    "OK",
    "USER_GPU_HOURS",
    "USER_RESOURCE",
    "USER_SERVERS",
    "Decision",
    "Limits",
    "Usage",
    "admit",
    "ceiling_violations",
    "gpu_amount",
    "gpu_seconds",
    "parse_limits",
    "week_window",
    "within_ceiling",
]

# Reason codes: stable strings, used as a Prometheus label; never reword them.
OK = "ok"
COURSE_RESOURCE = "course_resource"
USER_RESOURCE = "user_resource"
COURSE_SERVERS = "course_servers"
USER_SERVERS = "user_servers"
COURSE_GPU_HOURS = "course_gpu_hours"
USER_GPU_HOURS = "user_gpu_hours"
NOT_MEMBER = "not_member"

_ASK = "Stop a server or ask your teacher."


@dataclass(frozen=True)
class Decision:
    """The answer of `admit`: `message` is one sentence a student can act on ("" when allowed)."""

    allowed: bool
    reason_code: str
    message: str

    def __bool__(self) -> bool:
        return self.allowed


ALLOWED = Decision(True, OK, "")


@dataclass(frozen=True)
class Limits:
    """Ceilings of one user in a course, or of a whole course. Anything not named is unlimited.

    `resources` holds the positive ceilings; `zero` names the resources capped at zero (a
    ResourceVector cannot hold a zero entry). Build from API/JSON input with `parse_limits`.
    """

    resources: ResourceVector = ZERO
    servers: int | None = None
    gpu_hours_per_week: Fraction | None = None
    zero: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        if not self.resources.is_nonnegative():
            raise ValueError(f"resource limits must not be negative: {self.resources.human()}")
        both = self.zero & set(self.resources)
        if both:
            raise ValueError(f"{', '.join(sorted(both))} both capped at zero and above zero")
        if self.servers is not None and (
            isinstance(self.servers, bool) or not isinstance(self.servers, int) or self.servers < 0
        ):
            raise ValueError(f"servers must be a whole number >= 0, not {self.servers!r}")
        hours = self.gpu_hours_per_week
        if hours is not None and (not isinstance(hours, Fraction) or hours < 0):
            raise ValueError(f"gpu_hours_per_week must be a Fraction >= 0, not {hours!r}")

    @property
    def limited(self) -> frozenset[str]:
        """Names of the resources that have a ceiling (zero included)."""
        return self.zero | frozenset(self.resources)

    def ceiling(self, name: str) -> Fraction | None:
        """The ceiling of resource `name`, or None when it is not limited."""
        if name in self.zero:
            return Fraction(0)
        if name in self.resources:  # not .get(): a ResourceVector reads missing names as 0
            return self.resources[name]
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON form; `parse_limits(limits.to_dict()) == limits`."""
        resources = self.resources.to_k8s()
        resources.update({name: "0" for name in sorted(self.zero)})
        gpu_hours = self.gpu_hours_per_week
        return {
            "resources": resources,
            "servers": self.servers,
            "gpu_hours_per_week": None if gpu_hours is None else _fraction_text(gpu_hours),
        }


@dataclass(frozen=True)
class Usage:
    """What a user or a course holds now: resources and servers of unreleased reservations, and
    the GPU hours used in the current week (released reservations included)."""

    resources: ResourceVector = ZERO
    servers: int = 0
    gpu_hours_week: Fraction = Fraction(0)


# --------------------------------------------------------------------------- admission


def admit(
    request: ResourceVector,
    user: tuple[Limits, Usage],
    course: tuple[Limits, Usage] | None,
    course_name: str,
    *,
    servers: int = 1,
) -> Decision:
    """Decide whether `request` may start; the first binding limit is reported.

    `servers` is how many servers the request adds (1 for a user server, 0 for a batch job).
    Order: course limits first, then the user's. When both bind, the course message is shown and
    it quotes the user's own share ("you: 1 of 1"), so both facts reach the student.
    """
    if not request.is_nonnegative():
        raise ValueError(f"a request must not be negative: {request.human()}")
    if servers < 0:
        raise ValueError(f"servers must be >= 0, not {servers}")
    user_limits, user_usage = user
    if course is not None:
        limits, usage = course
        if servers and limits.servers is not None and usage.servers + servers > limits.servers:
            return Decision(
                False,
                COURSE_SERVERS,
                f"Course {course_name} already runs {usage.servers} of its {limits.servers} "
                f"servers{_your_servers(user_limits, user_usage)}. {_ASK}",
            )
        for name in request:
            cap = limits.ceiling(name)
            if cap is not None and usage.resources[name] + request[name] > cap:
                return Decision(
                    False,
                    COURSE_RESOURCE,
                    _resource_message(
                        f"Course {course_name}", "its", name, usage.resources[name], cap,
                        request[name], _your_share(name, user_limits, user_usage),
                    ),
                )
        if _gpu_hours_exhausted(request, limits, usage):
            return Decision(
                False,
                COURSE_GPU_HOURS,
                f"Course {course_name} used {_hours(usage.gpu_hours_week)} of its "
                f"{_hours(limits.gpu_hours_per_week)} GPU hours this week. CPU-only servers still "
                "start; ask your teacher for more GPU time.",
            )
    if (
        servers
        and user_limits.servers is not None
        and user_usage.servers + servers > user_limits.servers
    ):
        return Decision(
            False,
            USER_SERVERS,
            f"You already run {user_usage.servers} of your {user_limits.servers} servers. "
            "Stop a server first.",
        )
    for name in request:
        cap = user_limits.ceiling(name)
        if cap is not None and user_usage.resources[name] + request[name] > cap:
            return Decision(
                False,
                USER_RESOURCE,
                _resource_message("You", "your", name, user_usage.resources[name], cap, request[name]),
            )
    if _gpu_hours_exhausted(request, user_limits, user_usage):
        return Decision(
            False,
            USER_GPU_HOURS,
            f"You used {_hours(user_usage.gpu_hours_week)} of your "
            f"{_hours(user_limits.gpu_hours_per_week)} GPU hours this week. CPU-only servers still "
            "start; ask your teacher for more GPU time.",
        )
    return ALLOWED


def _gpu_hours_exhausted(request: ResourceVector, limits: Limits, usage: Usage) -> bool:
    return (
        limits.gpu_hours_per_week is not None
        and gpu_amount(request) > 0
        and usage.gpu_hours_week >= limits.gpu_hours_per_week
    )


def _resource_message(
    who: str, whose: str, name: str, used: Fraction, cap: Fraction, wanted: Fraction, share: str = ""
) -> str:
    """"Course CS101 uses 4 of its 4 nvidia.com/gpu (you: 1 of 1). Stop a server or ask ..."."""
    if cap == 0:
        verb = "may not use" if who == "You" else "does not allow"
        return f"{who} {verb} {name}{share}. Pick a profile without it or ask your teacher."
    verb = "use" if who == "You" else "uses"
    text = f"{who} {verb} {_bare(name, used)} of {whose} {human_quantity(name, cap)}"
    if used < cap:
        text += f" and this asks for {_bare(name, wanted)}"
    return f"{text}{share}. {_ASK}"


def _your_share(name: str, limits: Limits, usage: Usage) -> str:
    cap = limits.ceiling(name)
    used = _bare(name, usage.resources[name])
    return f" (you: {used})" if cap is None else f" (you: {used} of {_bare(name, cap)})"


def _your_servers(limits: Limits, usage: Usage) -> str:
    if limits.servers is None:
        return f" (you: {usage.servers})"
    return f" (you: {usage.servers} of {limits.servers})"


def _bare(name: str, value: Fraction) -> str:
    """An amount without the resource's label: "4", "0.5", "6 GiB" (bytes keep their unit)."""
    label = human_quantity(name, 1).split(" ", 1)[1]  # "nvidia.com/gpu", "CPU", "B memory"
    return human_quantity(name, value).removesuffix(" " + label.removeprefix("B "))


def _hours(value: Fraction | None) -> str:
    """Hours for people: at most two decimals, "~" when rounded (never more precise than shown)."""
    assert value is not None
    rounded = round(value, 2)
    text = f"{Decimal(rounded.numerator) / Decimal(rounded.denominator):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text if rounded == value else f"~{text}"


def _fraction_text(value: Fraction) -> str:
    """Exact text of a Fraction: a decimal when it has one ("10.5"), else "a/b"."""
    try:
        decimal = Decimal(value.numerator) / Decimal(value.denominator)
        if Fraction(decimal) == value:
            text = f"{decimal:f}"
            return text.rstrip("0").rstrip(".") if "." in text else text
    except InvalidOperation:
        pass
    return f"{value.numerator}/{value.denominator}"


# --------------------------------------------------------------------------- API validation

_LIMIT_KEYS = ("resources", "servers", "gpu_hours_per_week")
#: What the store's columns hold: ``servers`` is an Integer column (32 bits on PostgreSQL), GPU
#: hours are exact text of at most 64 characters (a billion hours is beyond any cluster's week).
MAX_SERVERS = 2**31 - 1
MAX_GPU_HOURS = 10**9
_HOURS_TEXT = 64


def parse_limits(data: Mapping[str, Any]) -> Limits:
    """Limits from JSON as sent to the API: {"resources": {...}, "servers": 2,
    "gpu_hours_per_week": 10}. Missing keys and null values mean "no limit".

    Raises ValueError naming the offending field for unknown keys, non-numbers and negatives, so
    the API can answer 400 with a sentence the teacher understands.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"limits must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(_LIMIT_KEYS))
    if unknown:
        raise ValueError(
            f"unknown limit {', '.join(map(repr, unknown))}; allowed: {', '.join(_LIMIT_KEYS)}"
        )
    resources, zero = _parse_resources(data.get("resources"))
    return Limits(
        resources=resources,
        servers=_parse_servers(data.get("servers")),
        gpu_hours_per_week=_parse_hours(data.get("gpu_hours_per_week")),
        zero=zero,
    )


def _parse_resources(raw: object) -> tuple[ResourceVector, frozenset[str]]:
    if raw is None:
        return ZERO, frozenset()
    if not isinstance(raw, Mapping):
        raise ValueError(
            'resources must be an object of resource name to quantity, e.g. {"nvidia.com/gpu": 4}'
        )
    given = {name: value for name, value in raw.items() if value is not None}
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"resources[{name!r}]: {value!r} is not a number or quantity")
    try:
        vector = ResourceVector.from_k8s(given)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"resources: {exc}") from None
    negative = sorted(name for name, amount in vector.items() if amount < 0)
    if negative:
        raise ValueError(f"resources: {', '.join(negative)} must not be negative")
    zero = frozenset(name for name in given if name not in vector)
    return vector, zero


def _parse_servers(raw: object) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"servers: {raw!r} is not a whole number")
    if raw < 0:
        raise ValueError(f"servers: {raw} must not be negative")
    if raw > MAX_SERVERS:
        raise ValueError(f"servers: {str(raw)[:24]} is out of range; allowed: 0 to {MAX_SERVERS}")
    return raw


def _parse_hours(raw: object) -> Fraction | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str, Fraction, Decimal)):
        raise ValueError(f"gpu_hours_per_week: {raw!r} is not a number")
    shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:40] + "..."
    if isinstance(raw, str) and len(raw) > _HOURS_TEXT:
        raise ValueError(f"gpu_hours_per_week: {shown} is longer than {_HOURS_TEXT} characters")
    try:
        if isinstance(raw, Fraction) or (isinstance(raw, str) and "/" in raw):
            value = Fraction(raw)
        else:
            # repr() of a JSON float is its shortest decimal spelling: 0.1 means exactly 1/10.
            decimal = Decimal(repr(raw) if isinstance(raw, float) else str(raw))
            if decimal.is_finite() and decimal and decimal.adjusted() > 12:  # before Fraction expands it
                raise ValueError("too large")
            value = Fraction(decimal)
    except (ValueError, ZeroDivisionError, InvalidOperation, OverflowError):
        raise ValueError(f"gpu_hours_per_week: {shown} is not a number from 0 to {MAX_GPU_HOURS}") from None
    if value < 0:
        raise ValueError(f"gpu_hours_per_week: {shown} must not be negative")
    if value > MAX_GPU_HOURS:
        raise ValueError(f"gpu_hours_per_week: {shown} is out of range; allowed: 0 to {MAX_GPU_HOURS}")
    if len(_fraction_text(value)) > _HOURS_TEXT:
        raise ValueError(f"gpu_hours_per_week: {shown} is too precise; write it in at most "
                         f"{_HOURS_TEXT} characters (e.g. 10.5 or 21/2)")
    return value


def ceiling_violations(student: Limits, course: Limits) -> list[str]:
    """Where per-student limits exceed the course ceiling, one sentence each ([] when none).

    A student limit left unset inherits the course ceiling (the course check still applies), so
    only limits that are set and higher than a set course ceiling are violations.
    """
    problems = []
    for name in sorted(student.limited):
        mine, theirs = student.ceiling(name), course.ceiling(name)
        if mine is not None and theirs is not None and mine > theirs:
            problems.append(
                f"{human_quantity(name, mine)} per student is above the course ceiling of "
                f"{human_quantity(name, theirs)}"
            )
    if student.servers is not None and course.servers is not None and student.servers > course.servers:
        problems.append(
            f"{student.servers} servers per student is above the course ceiling of {course.servers}"
        )
    mine_h, theirs_h = student.gpu_hours_per_week, course.gpu_hours_per_week
    if mine_h is not None and theirs_h is not None and mine_h > theirs_h:
        problems.append(
            f"{_hours(mine_h)} GPU hours per week per student is above the course ceiling of "
            f"{_hours(theirs_h)}"
        )
    return problems


def within_ceiling(student: Limits, course: Limits) -> bool:
    """True when a teacher may set `student` limits under `course` (see `ceiling_violations`)."""
    return not ceiling_violations(student, course)


# --------------------------------------------------------------------------- GPU hours


def gpu_amount(resources: ResourceVector) -> Fraction:
    """How many GPU devices a request holds: whole GPUs, shared replicas and MIG slices alike."""
    return sum((amount for name, amount in resources.items() if is_gpu_resource(name)), Fraction(0))


def gpu_seconds(
    intervals: Iterable[tuple[datetime, datetime | None, ResourceVector]],
    window_start: datetime,
    window_end: datetime,
    now: datetime | None = None,
) -> Fraction:
    """GPU-seconds held inside [window_start, window_end), exactly (microseconds included).

    Each interval is (started, released or None while still held, resources); a reservation
    still held counts until `now` (or until `window_end` when `now` is None). One GPU device of
    any kind (whole, MIG slice, shared replica) held for one second is one GPU-second.
    """
    total = Fraction(0)
    for started, released, resources in intervals:
        devices = gpu_amount(resources)
        if not devices:
            continue
        held_until = released if released is not None else (now or window_end)
        begin, end = max(started, window_start), min(held_until, window_end)
        if end > begin:
            total += devices * _seconds(end - begin)
    return total


def _seconds(delta: timedelta) -> Fraction:
    return Fraction(delta // timedelta(microseconds=1), 1_000_000)


def week_window(now: datetime) -> tuple[datetime, datetime]:
    """[Monday 00:00, next Monday 00:00) of `now`'s week, in `now`'s time zone (UTC in classhub)."""
    start = (now - timedelta(days=now.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=7)


def course_to_charge(profile_groups: Iterable[str], user_courses: Iterable[str]) -> str | None:
    """Which of the user's courses a server counts against.

    The first course (by name) that the profile is offered to and the user belongs to; for a
    profile offered to everyone, the user's first course. None: the user is in no course, and
    only their own usage is recorded.
    """
    mine = sorted(set(user_courses))
    offered = set(profile_groups)
    if offered:
        matching = [c for c in mine if c in offered]
        return matching[0] if matching else None
    return mine[0] if mine else None
