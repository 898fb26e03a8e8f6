"""Column types that keep classhub's values exact and unambiguous in sqlite and PostgreSQL.

Why: GPU-hours are computed from reservation timestamps to the second, and a sqlite DATETIME has
no time zone; quotas are exact Fractions, and a float column would round them. These decorators
store UTC timestamps and exact fractions the same way on both databases.
"""

from __future__ import annotations

from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

__all__ = ["ExactFraction", "JSONType", "UTCDateTime"]

#: JSON documents: jsonb on PostgreSQL (indexable, compact), JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes in, timezone-aware UTC datetimes out.

    Naive datetimes are refused: a local-time timestamp would shift GPU-hours by hours.
    sqlite stores the UTC wall time (it has no zone); PostgreSQL stores timestamptz.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime (UTC)")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class ExactFraction(TypeDecorator[Fraction]):
    """A Fraction stored as its exact text ("10", "21/2"), so 1/3 hour stays 1/3 hour."""

    impl = String(64)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if not isinstance(value, (Fraction, int)) or isinstance(value, bool):
            raise TypeError(f"expected a Fraction, not {type(value).__name__}")
        return str(Fraction(value))

    def process_result_value(self, value: str | None, dialect: Dialect) -> Fraction | None:
        return None if value is None else Fraction(value)
