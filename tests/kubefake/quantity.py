"""Kubernetes resource quantities ("500m", "1Gi", "2G", "1e3") parsed exactly.

Follows ``k8s.io/apimachinery/pkg/api/resource``: binary suffixes (Ki..Ei), decimal
suffixes (n, u, m, "", k, M, G, T, P, E) and decimal exponents (``1e3``, ``2E-3``).
Values are returned as :class:`fractions.Fraction` so sums never drift.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[eE][+-]?[0-9]+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)


class QuantityError(ValueError):
    """Raised for a string that is not a Kubernetes quantity."""


def parse_quantity(value: str | float) -> Fraction:
    """Return the exact value of a quantity, e.g. ``parse_quantity("500m") == Fraction(1, 2)``."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must match the regular expression: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    match = _RE.match(str(value).strip())
    if not match:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}"
        )
    number, suffix = match.group(1), match.group(2) or ""
    base = Fraction(number)
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    return base * Fraction(10) ** int(suffix[1:])


def is_quantity(value: object) -> bool:
    """True when ``value`` parses as a quantity."""
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except (QuantityError, TypeError, ValueError, ZeroDivisionError):
        return False
    return True


def format_quantity(value: Fraction, resource: str = "") -> str:
    """Render a quantity compactly (millicores for fractional values)."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(value))
