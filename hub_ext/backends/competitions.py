"""Competition files on a real file system: the hidden labels, the accepted predictions, the
notebooks students submit and the teacher's scoring script.

Why here (docs/architecture.md, rule 2): keeping files is the backends' work. They live in the
``competitions`` folder of the submissions storage (``c.ClasshubAssignments.storage_dir``), a
folder of the service's own made mode 0700, each file mode 0600: students never read the labels
or each other's predictions through the file system, and the API serves a predictions file only
to its student and the course's staff (hub_ext.service.competitions). Locations are made of ids
and random hex only, never of a name a user chose. A file is written under a temporary name and
renamed into place whole, so a reader never sees half of one.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["CompetitionStorage"]


class CompetitionStorage:
    """``<root>/c<competition id>/labels.csv`` and ``<root>/c<id>/<student key>/<random>.csv``."""

    def __init__(self, submissions_root: str | os.PathLike[str]) -> None:
        self.root = Path(submissions_root) / "competitions"

    def _ensure(self, folder: Path) -> None:
        """``folder`` (under the root) and the folders above it, each mode 0700."""
        self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root.parent, 0o700)
        path = self.root
        for part in ("", *folder.relative_to(self.root).parts):
            path = path / part if part else path
            path.mkdir(mode=0o700, exist_ok=True)
            os.chmod(path, 0o700)

    def _write(self, location: str, data: bytes) -> None:
        target = self.root / location
        self._ensure(target.parent)
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with open(fd, "wb") as f:
                f.write(data)
            partial.rename(target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def keep_labels(self, competition_id: int, data: bytes) -> str:
        """Keep the hidden labels; their location relative to the storage."""
        location = f"c{int(competition_id)}/labels-{secrets.token_hex(8)}.csv"
        self._write(location, data)
        return location

    def keep_predictions(self, competition_id: int, student_key: str, data: bytes) -> str:
        """Keep an accepted predictions file; its location."""
        location = f"c{int(competition_id)}/{student_key}/{secrets.token_hex(8)}.csv"
        self._write(location, data)
        return location

    def keep_notebook(self, competition_id: int, student_key: str, data: bytes) -> str:
        """Keep a submitted notebook (it runs as a job; kept so nothing is lost); its location."""
        location = f"c{int(competition_id)}/{student_key}/{secrets.token_hex(8)}.ipynb"
        self._write(location, data)
        return location

    def keep_scorer(self, competition_id: int, data: bytes) -> str:
        """Keep a teacher's scoring script (run only in the jobs' sandbox); its location."""
        location = f"c{int(competition_id)}/scorer-{secrets.token_hex(8)}.py"
        self._write(location, data)
        return location

    def read(self, location: str) -> bytes:
        fd = os.open(self.root / location, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            return f.read()

    def remove(self, location: str) -> None:
        (self.root / location).unlink(missing_ok=True)
