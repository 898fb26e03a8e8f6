"""Archives the tests publish as templates: a zip built in memory from {name: bytes}."""

from __future__ import annotations

import io
import zipfile


def zip_bytes(members: dict[str, bytes]) -> bytes:
    """A zip archive holding ``members`` (name -> content), as a teacher would upload it."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()
