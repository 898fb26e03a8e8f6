"""Which single-user servers the idle culler stops, and why: one pure decision per cycle.

Why a module of its own: GPUs are the scarce resource, so an idle GPU server must be freed quickly,
but a long training run must never be killed because nobody has the browser open. The culler
service (``culler/``) gathers the facts (hub ``last_activity``, busy kernels reported by the
single-user extension, GPU utilisation from DCGM/NVML, the admin's persistent mark, the resources
the server holds) and asks `decide`; every answer carries a stable reason code (a Prometheus label)
and one sentence a student or an admin can read. The table of rules is tested exhaustively without a
hub (tests/test_core_culling.py).

Which policy applies (`resolve_policy`), most specific first; ``policies`` is a mapping keyed by
``(profile, course)`` where ``None`` is a wildcard:
1. ``(profile, course)``: this profile in this course;
2. ``(profile, None)``: this profile in any course (and outside courses);
3. ``(None, course)``: any profile of this course;
4. ``(None, None)``: the site default;
5. `DEFAULT_POLICY` when the mapping has no default.
A server without a course only matches keys 2, 4 and 5.

Rules of one server, first match wins (so precedence is the order below):
1. ``persistent``: an admin-marked server is never culled, not for age, not for pressure.
2. ``never_cull``: its policy exempts it (e.g. a demo profile).
2b. ``reserved_window``: its course is inside a no-cull window (e.g. an exam, `Window`); kept, also
   under pressure; ``cull_at`` is no earlier than the window's end.
3. ``busy_kernel``: a kernel is executing; that is activity even with no browser connected.
4. ``busy_gpu``: the GPU is busy (``gpu_busy`` is true, or the last utilisation seen is at least
   the policy's ``gpu_busy_utilization`` percent). A busy server is never culled, also not for
   ``max_age``: the age limit waits until the run is quiet.
5. ``too_old``: the server is older than the policy's ``max_age`` (when set).
6. ``idle``: idle (since the latest of start, hub activity and kernel activity) for at least the
   policy's ``idle_timeout``.
7. ``not_idle_yet``: kept; `Decision.cull_at` says when rule 5 or 6 would cull it (for warnings).

Warnings (the policy's ``warn_before`` seconds; 0, the default, means no warnings): the user sees
a warning before every routine cull (rules 5 and 6). ``ServerFacts.warned_at`` is when the culler
last showed one (it keeps that in its store):
- a server that rule 5 or 6 would cull is culled only when it was warned at least ``warn_before``
  ago; otherwise the decision is ``warned`` (kept, ``warn`` true) with ``cull_at`` = the warning
  time (now when not yet warned) + ``warn_before``;
- a server kept under rule 7 whose ``cull_at`` is at most ``warn_before`` away is ``warned`` too.
`Decision.action` is then ``"warn"`` (``"cull"`` / ``"keep"`` otherwise). Pressure reclaims are not
delayed by warnings: a waiting user needs the capacity now, and reclaiming needs
``pressure_min_idle`` of idleness anyway.

Pressure reclaim (``pressure``: resource name -> units missing, e.g. ``{"nvidia.com/gpu": 2}``):
- units freed by this cycle's routine culls (rules 5 and 6) count first;
- then, per resource in name order, the still-missing units are reclaimed from servers kept under
  rule 7 that hold that resource and have been idle at least their policy's ``pressure_min_idle``,
  longest idle first (ties: user, then server name); reclaiming stops as soon as the shortage is
  covered, so only the last server reclaimed for a resource may free more than was missing;
- persistent, ``never_cull``, busy servers and servers inside a reserved window are never reclaimed.
A reclaimed server frees every resource it holds, so it also counts against later resources.

Output: one `Decision` per server, sorted by (user, server name) whatever the input order;
reclaims carry ``rank`` (1, 2, ... in the order they were chosen) and the ``resource`` they
were reclaimed for.

Pure: standard library only (docs/architecture.md, rule 1). Times are `datetime` (all aware or all naive,
as the caller chooses); durations are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from .resources import gpu_kind

__all__ = [
    "BUSY_GPU",
    "BUSY_KERNEL",
    "CULL",
    "CULL_REASONS",
    "DEFAULT_POLICY",
    "IDLE",
    "KEEP",
    "KEEP_REASONS",
    "NEVER_CULL",
    "NOT_IDLE_YET",
    "PERSISTENT",
    "RECLAIM_FOR_PRESSURE",
    "RESERVED_WINDOW",
    "TOO_OLD",
    "WARN",
    "WARNED",
    "CullPolicy",
    "Decision",
    "PolicyKey",
    "ServerFacts",
    "Window",
    "active_window",
    "decide",
    "format_duration",
    "held_gpus",
    "idle_since",
    "is_busy",
    "resolve_policy",
    "resolve_policy_key",
    "server_kind",
]

# Reason codes: stable strings, used as a Prometheus label; never reword them.
IDLE = "idle"
TOO_OLD = "too_old"
RECLAIM_FOR_PRESSURE = "reclaim_for_pressure"
BUSY_KERNEL = "busy_kernel"
BUSY_GPU = "busy_gpu"
PERSISTENT = "persistent"
NEVER_CULL = "never_cull"
NOT_IDLE_YET = "not_idle_yet"
RESERVED_WINDOW = "reserved_window"
WARNED = "warned"

CULL_REASONS = frozenset({IDLE, TOO_OLD, RECLAIM_FOR_PRESSURE})
KEEP_REASONS = frozenset(
    {BUSY_KERNEL, BUSY_GPU, PERSISTENT, NEVER_CULL, NOT_IDLE_YET, RESERVED_WINDOW, WARNED}
)

# Actions (`Decision.action`).
CULL = "cull"
WARN = "warn"
KEEP = "keep"

PolicyKey = tuple[str | None, str | None]


def _check_seconds(name: str, value: float | None, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value!r}")


@dataclass(frozen=True)
class CullPolicy:
    """How long a server may stay idle or alive; one per profile, course or both (see module doc)."""

    idle_timeout: float = 3600.0
    max_age: float | None = None
    never_cull: bool = False
    pressure_min_idle: float = 300.0
    gpu_busy_utilization: float = 5.0  # percent; utilisation at or above this means "GPU busy"
    warn_before: float = 0.0  # seconds of warning before a routine cull; 0: none

    def __post_init__(self) -> None:
        _check_seconds("idle_timeout", self.idle_timeout)
        _check_seconds("warn_before", self.warn_before)
        _check_seconds("max_age", self.max_age, optional=True)
        _check_seconds("pressure_min_idle", self.pressure_min_idle)
        u = self.gpu_busy_utilization
        if isinstance(u, bool) or not isinstance(u, int | float) or not 0 <= u <= 100:
            raise ValueError(f"gpu_busy_utilization must be a percentage in [0, 100], not {u!r}")


DEFAULT_POLICY = CullPolicy()


@dataclass(frozen=True)
class Window:
    """A no-cull window of one course, ``[start, end)`` (e.g. an exam); ``note`` says why."""

    course: str
    start: datetime
    end: datetime
    note: str = ""

    def __post_init__(self) -> None:
        if not self.end > self.start:
            raise ValueError(f"a window must end after it starts ({self.start} .. {self.end})")

    def covers(self, now: datetime) -> bool:
        return self.start <= now < self.end


def active_window(course: str | None, windows: Iterable[Window], now: datetime) -> Window | None:
    """The window of ``course`` covering ``now`` that ends last (None: none, or no course)."""
    if course is None:
        return None
    found = [w for w in windows if w.course == course and w.covers(now)]
    return max(found, key=lambda w: w.end) if found else None


@dataclass(frozen=True, kw_only=True)
class ServerFacts:
    """What the culler knows about one running server.

    ``resources`` (resource name -> units held, e.g. ``{"nvidia.com/gpu": 1}``) may be given as a
    mapping; it is stored as sorted ``(name, units)`` pairs so facts stay hashable. Keyword-only.
    ``gpu_utilization`` is the last utilisation seen, in percent (None: unknown).
    """

    user: str
    started_at: datetime
    server_name: str = ""
    profile: str = ""
    course: str | None = None
    last_activity: datetime | None = None
    busy_kernels: int = 0
    last_kernel_activity: datetime | None = None
    gpu_busy: bool | None = None
    gpu_utilization: float | None = None
    persistent: bool = False
    resources: tuple[tuple[str, int], ...] = ()
    warned_at: datetime | None = None  # when the user was last warned of this cull (culler store)

    def __post_init__(self) -> None:
        items = self.resources.items() if isinstance(self.resources, Mapping) else self.resources
        merged: dict[str, int] = {}
        for name, units in items:
            if isinstance(units, bool) or not isinstance(units, int) or units < 0:
                raise ValueError(f"units of {name!r} must be an integer >= 0, not {units!r}")
            merged[name] = merged.get(name, 0) + units
        object.__setattr__(self, "resources", tuple(sorted((k, v) for k, v in merged.items() if v)))
        n = self.busy_kernels
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"busy_kernels must be an integer >= 0, not {self.busy_kernels!r}")
        u = self.gpu_utilization
        if u is not None and (isinstance(u, bool) or not isinstance(u, int | float) or not 0 <= u <= 100):
            raise ValueError(f"gpu_utilization must be a percentage in [0, 100] or None, not {u!r}")

    @property
    def key(self) -> tuple[str, str]:
        return (self.user, self.server_name)

    @property
    def label(self) -> str:
        return f"{self.user}'s server {self.server_name!r}" if self.server_name else f"{self.user}'s server"

    def held(self, resource: str) -> int:
        """Units of ``resource`` this server holds (0 when none)."""
        return dict(self.resources).get(resource, 0)


@dataclass(frozen=True)
class Decision:
    """Cull or keep one server; ``reason`` is a stable code, ``message`` one human sentence."""

    user: str
    server_name: str
    cull: bool
    reason: str
    message: str
    policy_key: PolicyKey
    idle_seconds: float
    cull_at: datetime | None = None  # for kept servers: when the age or idle rule would cull it
    resource: str | None = None  # for reclaims: the resource it was reclaimed for
    rank: int | None = None  # for reclaims: 1, 2, ... in the order chosen
    warn: bool = False  # the user must be warned now that the server is culled at `cull_at`

    def __bool__(self) -> bool:
        return self.cull

    @property
    def action(self) -> str:
        """`CULL`, `WARN` (kept, and the user is warned of the cull at `cull_at`) or `KEEP`."""
        return CULL if self.cull else WARN if self.warn else KEEP


def resolve_policy_key(facts: ServerFacts, policies: Mapping[PolicyKey, CullPolicy]) -> PolicyKey | None:
    """The key of the most specific policy for ``facts`` (None: `DEFAULT_POLICY` applies)."""
    candidates: list[PolicyKey] = []
    if facts.course is not None:
        candidates.append((facts.profile, facts.course))
    candidates.append((facts.profile, None))
    if facts.course is not None:
        candidates.append((None, facts.course))
    candidates.append((None, None))
    for key in candidates:
        if key in policies:
            return key
    return None


def resolve_policy(facts: ServerFacts, policies: Mapping[PolicyKey, CullPolicy]) -> CullPolicy:
    """The policy that applies to ``facts``: profile+course > profile > course > default."""
    key = resolve_policy_key(facts, policies)
    return DEFAULT_POLICY if key is None else policies[key]


def idle_since(facts: ServerFacts) -> datetime:
    """The latest sign of life: start, hub activity or kernel activity."""
    times = [t for t in (facts.started_at, facts.last_activity, facts.last_kernel_activity) if t is not None]
    return max(times)


def is_busy(facts: ServerFacts, policy: CullPolicy) -> str | None:
    """`BUSY_KERNEL`, `BUSY_GPU` or None: why the server is not idle whatever its activity times."""
    if facts.busy_kernels > 0:
        return BUSY_KERNEL
    if facts.gpu_busy:
        return BUSY_GPU
    if facts.gpu_utilization is not None and facts.gpu_utilization >= policy.gpu_busy_utilization:
        return BUSY_GPU
    return None


def held_gpus(resources: Mapping[str, int]) -> dict[str, int]:
    """The GPU resources among what a server holds (whole, MIG, shared, other vendors'), by the
    one grammar of `hub_ext.core.resources`: what pressure reclaim and culled GPU-hours count."""
    return {name: units for name, units in resources.items() if units and gpu_kind(name)}


def server_kind(resources: Mapping[str, int]) -> str:
    """The profile kind whose idle timeout applies, from what the server holds: "gpu" (whole
    GPUs), "mig" (MIG slices), "shared" (time-sliced/MPS replicas) or "cpu" (no GPU)."""
    kinds = {gpu_kind(name) for name in held_gpus(resources)}
    return next((kind for kind in ("gpu", "mig", "shared") if kind in kinds), "cpu")


def format_duration(seconds: float) -> str:
    """Seconds as a short human duration: '45 s', '12 min', '2 h 5 min', '3 d 4 h'."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def _policy_name(key: PolicyKey | None) -> str:
    if key is None or key == (None, None):
        return "the site default policy"
    profile, course = key
    if profile is not None and course is not None:
        return f"the policy of profile {profile!r} in course {course!r}"
    if profile is not None:
        return f"the policy of profile {profile!r}"
    return f"the policy of course {course!r}"


def _routine(
    facts: ServerFacts, policy: CullPolicy, key: PolicyKey | None, now: datetime,
    window: Window | None = None,
) -> tuple[bool, str, str, float, datetime | None]:
    """Rules 1-7 and the warning for one server: (cull, reason, message, idle seconds, cull_at)."""
    cull, reason, msg, idle, cull_at = _rules(facts, policy, key, now)
    if reason in (PERSISTENT, NEVER_CULL):
        return cull, reason, msg, idle, cull_at
    if window is not None:
        end = window.end if cull_at is None or reason != NOT_IDLE_YET else max(cull_at, window.end)
        why = f" ({window.note})" if window.note else ""
        msg = (
            f"{facts.label} is in a no-cull window of course {window.course!r}{why} until "
            f"{window.end.isoformat()}; kept."
        )
        return False, RESERVED_WINDOW, msg, idle, end if reason in (IDLE, TOO_OLD, NOT_IDLE_YET) else None
    if policy.warn_before <= 0:
        return cull, reason, msg, idle, cull_at
    warn = timedelta(seconds=policy.warn_before)
    if cull:
        if facts.warned_at is not None and now >= facts.warned_at + warn:
            return cull, reason, msg, idle, cull_at
        due = (facts.warned_at or now) + warn
        due = max(due, now)
        msg = (
            f"{facts.label} will be culled in about {format_duration((due - now).total_seconds())} "
            f"(at {due.isoformat()}): {msg[:-len('culled.')].rstrip('; ')}. Use it to keep it."
        )
        return False, WARNED, msg, idle, due
    if reason == NOT_IDLE_YET and cull_at is not None and cull_at - now <= warn:
        msg = (
            f"{facts.label} will be culled in about "
            f"{format_duration((cull_at - now).total_seconds())} (at {cull_at.isoformat()}) unless "
            f"it is used: idle for {format_duration(idle)}, the idle timeout is "
            f"{format_duration(policy.idle_timeout)}."
        )
        return False, WARNED, msg, idle, cull_at
    return cull, reason, msg, idle, cull_at


def _rules(
    facts: ServerFacts, policy: CullPolicy, key: PolicyKey | None, now: datetime
) -> tuple[bool, str, str, float, datetime | None]:
    """Rules 1-7 for one server: (cull, reason, message, idle seconds, cull_at)."""
    since = idle_since(facts)
    idle = max(0.0, (now - since).total_seconds())
    age = max(0.0, (now - facts.started_at).total_seconds())
    who, pname = facts.label, _policy_name(key)
    if facts.persistent:
        return False, PERSISTENT, f"{who} is marked persistent by an admin and is never culled.", idle, None
    if policy.never_cull:
        return False, NEVER_CULL, f"{who} is exempt from culling by {pname}.", idle, None
    busy = is_busy(facts, policy)
    if busy == BUSY_KERNEL:
        n = facts.busy_kernels
        msg = f"{who} has {n} busy kernel{'s' if n != 1 else ''}, so it is not idle; kept."
        return False, BUSY_KERNEL, msg, idle, None
    if busy == BUSY_GPU:
        util = "" if facts.gpu_utilization is None else f" ({facts.gpu_utilization:g}% utilisation)"
        return False, BUSY_GPU, f"{who} is using its GPU{util}, so it is not idle; kept.", idle, None
    if policy.max_age is not None and age >= policy.max_age:
        msg = (
            f"{who} has run for {format_duration(age)}, past the maximum age of "
            f"{format_duration(policy.max_age)} set by {pname}; culled."
        )
        return True, TOO_OLD, msg, idle, None
    if idle >= policy.idle_timeout:
        msg = (
            f"{who} has been idle for {format_duration(idle)}, past the idle timeout of "
            f"{format_duration(policy.idle_timeout)} set by {pname}; culled."
        )
        return True, IDLE, msg, idle, None
    cull_at = since + timedelta(seconds=policy.idle_timeout)
    if policy.max_age is not None:
        cull_at = min(cull_at, facts.started_at + timedelta(seconds=policy.max_age))
    msg = (
        f"{who} has been idle for {format_duration(idle)}, under the idle timeout of "
        f"{format_duration(policy.idle_timeout)} set by {pname}; kept."
    )
    return False, NOT_IDLE_YET, msg, idle, cull_at


def _check_pressure(pressure: Mapping[str, int] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, missing in (pressure or {}).items():
        if isinstance(missing, bool) or not isinstance(missing, int) or missing < 0:
            raise ValueError(f"shortage of {name!r} must be an integer >= 0, not {missing!r}")
        if missing:
            out[name] = missing
    return out


def decide(
    facts: Iterable[ServerFacts],
    policies: Mapping[PolicyKey, CullPolicy],
    now: datetime,
    pressure: Mapping[str, int] | None = None,
    windows: Iterable[Window] = (),
) -> list[Decision]:
    """One decision per server (sorted by user, server name); see the module doc for the rules.

    ``windows``: the no-cull windows of all courses (past and future ones are ignored).
    """
    windows = [w for w in windows if w.covers(now)]
    servers = sorted(facts, key=lambda f: f.key)
    for a, b in pairwise(servers):
        if a.key == b.key:
            raise ValueError(f"duplicate server {a.label}")
    shortage = _check_pressure(pressure)

    decisions: dict[tuple[str, str], Decision] = {}
    candidates: list[tuple[ServerFacts, CullPolicy, float]] = []
    for f in servers:
        key = resolve_policy_key(f, policies)
        policy = DEFAULT_POLICY if key is None else policies[key]
        window = active_window(f.course, windows, now)
        cull, reason, msg, idle, cull_at = _routine(f, policy, key, now, window)
        decisions[f.key] = Decision(
            f.user, f.server_name, cull, reason, msg, key or (None, None), idle, cull_at=cull_at,
            warn=reason == WARNED,
        )
        if cull:
            for name in shortage:
                shortage[name] -= f.held(name)
        elif reason in (NOT_IDLE_YET, WARNED) and idle >= policy.pressure_min_idle:
            candidates.append((f, policy, idle))

    # Longest idle first; ties broken by (user, server name) so the order never depends on input order.
    candidates.sort(key=lambda c: (-c[2], c[0].key))
    rank = 0
    for name in sorted(shortage):
        for f, policy, idle in candidates:
            if shortage[name] <= 0:
                break
            if decisions[f.key].cull or not f.held(name):
                continue
            rank += 1
            for other in shortage:
                shortage[other] -= f.held(other)
            held = ", ".join(f"{units} {res}" for res, units in f.resources)
            msg = (
                f"{f.label} has been idle for {format_duration(idle)} (at least the "
                f"{format_duration(policy.pressure_min_idle)} reclaim threshold) and holds {held}, "
                f"which a waiting user needs; culled to reclaim capacity."
            )
            old = decisions[f.key]
            decisions[f.key] = Decision(
                f.user, f.server_name, True, RECLAIM_FOR_PRESSURE, msg, old.policy_key, idle,
                resource=name, rank=rank,
            )
    return [decisions[f.key] for f in servers]
