"""The teacher tutorial is the browser tests' script (docs/tutorials/first-class.md).

Each journey the tutorial walks is a part of it between two MyST comment lines,
``% journey: NAME`` and ``% end journey: NAME`` (parts may overlap: a journey can span two
steps). A part states how many clicks the journey takes ("9 clicks", "(1 click)"), exactly once,
and names in bold the buttons and links the reader presses. The browser test that performs the
journey ends it with `follows_the_tutorial`: it fails when the test's clicks and the tutorial's
count differ, or when a button the tutorial names was not among the elements the test clicked.
tests/test_docs.py checks the other way: every journey of the tutorial is performed by a test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorials" / "first-class.md"
BEGIN = re.compile(r"^% journey: (\w+)\s*$")
END = re.compile(r"^% end journey: (\w+)\s*$")
COUNT = re.compile(r"\b(\d+) clicks?\b")
BOLD = re.compile(r"\*\*(.+?)\*\*")


@dataclass(frozen=True)
class Journey:
    name: str
    clicks: int
    buttons: tuple[str, ...]


def journeys(text: str | None = None) -> dict[str, Journey]:
    """Every journey of the tutorial by name; a malformed part raises ValueError naming it."""
    lines = (TUTORIAL.read_text() if text is None else text).splitlines()
    open_: dict[str, list[str]] = {}
    found: dict[str, Journey] = {}
    for line in lines:
        if m := BEGIN.match(line):
            if m[1] in open_ or m[1] in found:
                raise ValueError(f"journey {m[1]} begins twice in {TUTORIAL.name}")
            open_[m[1]] = []
        elif m := END.match(line):
            part = open_.pop(m[1], None)
            if part is None:
                raise ValueError(f"journey {m[1]} ends without beginning in {TUTORIAL.name}")
            body = " ".join(part)
            counts = COUNT.findall(body)
            if len(counts) != 1:
                raise ValueError(f"journey {m[1]} must state its clicks once ('N clicks'), "
                                 f"found {len(counts)} in {TUTORIAL.name}")
            found[m[1]] = Journey(m[1], int(counts[0]), tuple(BOLD.findall(body)))
        else:
            for part in open_.values():
                part.append(line)
    if open_:
        raise ValueError(f"journey {', '.join(open_)} never ends in {TUTORIAL.name}")
    return found


def follows_the_tutorial(clicks, name: str) -> None:
    """The journey ``name`` took the tutorial's clicks and pressed every button it names."""
    journey = journeys()[name]
    assert clicks.count == journey.clicks, (
        f"{name}: the test clicked {clicks.count} times, {TUTORIAL.name} says {journey.clicks}: "
        "change the one that is wrong")
    missing = [b for b in journey.buttons if b not in clicks.labels]
    assert not missing, (f"{name}: {TUTORIAL.name} says to press {missing}, the test clicked "
                         f"{clicks.labels}")
