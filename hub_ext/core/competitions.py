"""Competitions: strict CSV parsing, the public/private split, scoring and the leaderboard (issue 34).

Why pure: a leaderboard is a promise to a whole class ("your score on the hidden labels, the
earlier submission wins a tie, the private split decides at the end"), and the REST API, the
course page and the tests must keep it the same way. Everything here is a function of the
competition's labels, a student's predictions file, the competition's seed and the server's
clock; it is unit- and property-tested without a hub (tests/test_competitions_units.py).

- The split: an id is public when a hash of (the competition's secret seed, the id) falls below
  the public fraction. It is fixed when the competition is created, the same for every
  submission, and a partition of the labels' ids (each id is public or private, never both).
- A predictions file must name every id of the labels exactly once and nothing else; each
  problem is answered with a sentence saying what to change.

Pure: standard library and hub_ext.core only (docs/architecture.md, rule 1).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

__all__ = [
    "FAILED",
    "METRICS",
    "PENDING",
    "SCORED",
    "CompetitionError",
    "Entry",
    "Limits",
    "check_file_name",
    "check_score",
    "check_window",
    "day_start",
    "higher_is_better",
    "is_public",
    "leaderboard",
    "parse_labels",
    "parse_predictions",
    "score",
    "split",
    "window_verdict",
]

ACCURACY = "accuracy"
RMSE = "rmse"
MACRO_F1 = "macro_f1"
#: The built-in metrics: class labels (accuracy, macro F1) or numbers (root mean squared error).
METRICS = (ACCURACY, RMSE, MACRO_F1)
_NUMERIC = frozenset({RMSE})


#: A submission's state: waiting for its notebook or scoring job; scored (on the leaderboard);
#: failed (a sentence says why; it neither ranks nor counts against the daily limit).
PENDING, SCORED, FAILED = "pending", "scored", "failed"
STATES = (PENDING, SCORED, FAILED)


class CompetitionError(ValueError):
    """A competition or a predictions file the caller must change; the message says what."""


@dataclass(frozen=True)
class Limits:
    """Upper bounds of one uploaded CSV, so one file cannot fill the service's memory or disk."""

    max_bytes: int = 8 * 1024 * 1024
    max_rows: int = 200_000
    max_field: int = 256  # characters of one id or value


def higher_is_better(metric: str) -> bool:
    """Whether a larger score ranks first (accuracy, macro F1) or a smaller one (RMSE)."""
    return metric not in _NUMERIC


def check_score(value: object, what: str = "score()") -> float:
    """A scoring script's answer, parsed strictly: an int or a float that is finite (not a bool,
    not a string that looks like a number, not NaN); else a CompetitionError saying so. The
    script is the teacher's code, but its answer crosses a sandbox's boundary and ranks a class."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise CompetitionError(f"The scoring script's {what} returned {shown} ({type(value).__name__}), "
                               "not a number; make it return a float.")
    number = float(value)
    if not math.isfinite(number):
        raise CompetitionError(f"The scoring script's {what} returned {number}, not a finite number; "
                               "make it return a finite float.")
    return number


def check_file_name(name: str) -> str:
    """The predictions file a submitted notebook writes: one plain file name in the notebook's
    folder (letters, digits, ``.``, ``_``, ``-``; no folder, no leading dot)."""
    ok = (0 < len(name) <= 64 and name[0].isalnum() and name.isascii()
          and all(c.isalnum() or c in "._-" for c in name) and ".." not in name)
    if not ok:
        raise CompetitionError(f"predictions_file {name!r} is not a plain file name; give a name like "
                               "predictions.csv (letters, digits, '.', '_', '-'; no folder).")
    return name


def _rows(data: bytes, what: str, header: tuple[str, str], limits: Limits) -> list[tuple[int, str, str]]:
    """(line, first, second) of a two-column CSV with the given header, or a CompetitionError."""
    if len(data) > limits.max_bytes:
        raise CompetitionError(f"The {what} file has {len(data)} bytes, more than the {limits.max_bytes} "
                               "this competition takes; send a smaller file.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CompetitionError(f"The {what} file is not UTF-8 text; save it as a UTF-8 CSV.") from None
    if "\x00" in text:
        raise CompetitionError(f"The {what} file contains NUL characters; send a plain-text CSV.")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        first = next(reader, None)
        if first is None or [c.strip().lower() for c in first] != list(header):
            got = ",".join(first) if first else "nothing"
            raise CompetitionError(f"The {what} file must start with the header line "
                                   f"{','.join(header)} (it starts with {got[:80]!r}).")
        out = []
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(out) >= limits.max_rows:
                raise CompetitionError(f"The {what} file has more than {limits.max_rows} rows; send at "
                                       "most that many.")
            if len(row) != 2:
                raise CompetitionError(f"Line {line} of the {what} file has {len(row)} fields; each line "
                                       f"is {','.join(header)}.")
            key, value = row[0].strip(), row[1].strip()
            if not key:
                raise CompetitionError(f"Line {line} of the {what} file has an empty id.")
            if len(key) > limits.max_field or len(value) > limits.max_field:
                raise CompetitionError(f"Line {line} of the {what} file has a field longer than "
                                       f"{limits.max_field} characters.")
            out.append((line, key, value))
        return out
    except csv.Error as e:
        raise CompetitionError(f"The {what} file is not a valid CSV (line {reader.line_num}: {e}).") from None


def _value(metric: str, raw: str, line: int, what: str) -> str | float:
    if metric not in _NUMERIC:
        if not raw:
            raise CompetitionError(f"Line {line} of the {what} file has an empty value; give one for "
                                   "each id.")
        return raw
    try:
        number = float(raw)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise CompetitionError(f"Line {line} of the {what} file has {raw!r}, not a finite number; "
                               f"the metric {metric} compares numbers.")
    return number


def parse_labels(data: bytes, metric: str, limits: Limits = Limits()) -> dict[str, str | float]:
    """The hidden labels (``id,label`` CSV) by id, checked for the metric; at least one row."""
    if metric not in METRICS:
        raise CompetitionError(f"metric {metric!r} is none of {', '.join(METRICS)}")
    labels: dict[str, str | float] = {}
    for line, key, raw in _rows(data, "labels", ("id", "label"), limits):
        if key in labels:
            raise CompetitionError(f"Line {line} of the labels file repeats the id {key!r}; each id once.")
        labels[key] = _value(metric, raw, line, "labels")
    if not labels:
        raise CompetitionError("The labels file has no rows after its header; add id,label lines.")
    return labels


def parse_predictions(data: bytes, labels: Mapping[str, str | float], metric: str,
                      limits: Limits = Limits()) -> dict[str, str | float]:
    """A student's predictions (``id,prediction`` CSV): every id of the labels exactly once, no
    other id; otherwise a CompetitionError saying what to change."""
    predicted: dict[str, str | float] = {}
    for line, key, raw in _rows(data, "predictions", ("id", "prediction"), limits):
        if key in predicted:
            raise CompetitionError(f"Line {line} repeats the id {key!r}; give one prediction per id.")
        if key not in labels:
            raise CompetitionError(f"Line {line} has the id {key!r}, which is not in this competition's "
                                   "test set; predict only the ids of the test set.")
        predicted[key] = _value(metric, raw, line, "predictions")
    missing = [k for k in labels if k not in predicted]
    if missing:
        shown = ", ".join(repr(k) for k in missing[:5]) + (", …" if len(missing) > 5 else "")
        raise CompetitionError(f"{len(missing)} id(s) of the test set have no prediction ({shown}); "
                               "give one line for every id.")
    return predicted


def is_public(key: str, seed: str, fraction: float) -> bool:
    """Whether the id ``key`` counts on the public leaderboard: a hash of (seed, id) mapped to
    [0, 1) falls below ``fraction``. Fixed for a competition; the same for every submission."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split(ids: Iterable[str], seed: str, fraction: float) -> tuple[list[str], list[str]]:
    """(public ids, private ids): a partition of ``ids``, in their order."""
    public, private = [], []
    for key in ids:
        (public if is_public(key, seed, fraction) else private).append(key)
    return public, private


def score(metric: str, truth: Mapping[str, str | float], predicted: Mapping[str, str | float],
          ids: Sequence[str]) -> float | None:
    """The metric over ``ids`` (None for no ids: a split may be empty on a tiny test set)."""
    if not ids:
        return None
    if metric == RMSE:
        return math.sqrt(math.fsum((float(predicted[k]) - float(truth[k])) ** 2 for k in ids) / len(ids))
    if metric == ACCURACY:
        return sum(1 for k in ids if predicted[k] == truth[k]) / len(ids)
    if metric == MACRO_F1:
        classes = sorted({str(truth[k]) for k in ids})
        f1s = []
        for c in classes:
            tp = sum(1 for k in ids if truth[k] == c and predicted[k] == c)
            fp = sum(1 for k in ids if truth[k] != c and predicted[k] == c)
            fn = sum(1 for k in ids if truth[k] == c and predicted[k] != c)
            f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
        return sum(f1s) / len(f1s)
    raise CompetitionError(f"metric {metric!r} is none of {', '.join(METRICS)}")


def check_window(opens_at: datetime, ends_at: datetime) -> None:
    """A CompetitionError unless both times have a zone and the end is after the opening."""
    for name, value in (("opens_at", opens_at), ("ends_at", ends_at)):
        if value.tzinfo is None:
            raise CompetitionError(f"{name} has no time zone; give it as ISO 8601 with an offset "
                                   "(e.g. 2026-12-10T17:00:00+00:00)")
    if ends_at <= opens_at:
        raise CompetitionError("ends_at must be after opens_at")


def window_verdict(opens_at: datetime, ends_at: datetime, now: datetime) -> str:
    """Why a submission at ``now`` (the server's clock) is refused; "" when it is accepted."""
    if now < opens_at:
        return f"The competition opens at {opens_at.isoformat()}; submit after that."
    if now > ends_at:
        return f"The competition ended at {ends_at.isoformat()}; no more submissions are scored."
    return ""


def day_start(now: datetime) -> datetime:
    """The start of ``now``'s UTC day: the daily submission limit counts from there."""
    return now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Entry:
    """One scored submission as the leaderboard ranks it."""

    id: int
    student: str
    submitted_at: datetime
    public: float | None
    private: float | None


def leaderboard(entries: Iterable[Entry], metric: str, which: str,
                higher: bool | None = None) -> list[tuple[int, Entry]]:
    """(rank, each student's best submission) by the ``which`` score ("public" or "private"):
    best first, a tie broken by the earlier submission (then the smaller id); equal scores still
    get distinct ranks. Submissions without that score (an empty split) rank last. ``higher``:
    the direction of a teacher's scoring script (None: the built-in metric's)."""
    better = higher_is_better(metric) if higher is None else higher
    sign = -1.0 if better else 1.0

    def key(e: Entry) -> tuple[int, float, datetime, int]:
        value = getattr(e, which)
        return (value is None, sign * value if value is not None else 0.0, e.submitted_at, e.id)

    best: dict[str, Entry] = {}
    for e in entries:
        if e.student not in best or key(e) < key(best[e.student]):
            best[e.student] = e
    return list(enumerate(sorted(best.values(), key=key), start=1))
