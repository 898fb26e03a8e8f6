"""Reading the project's own source in tests (the import rules of docs/architecture.md)."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_module(path: Path) -> ast.Module:
    """``ast.parse`` with the garbage collector paused.

    Why: on Python 3.11 a finalizer that logs a traceback (an asyncio future whose exception no
    one read, left by an earlier test in the same worker) parses source itself, and an
    ``ast.parse`` inside another fails the outer one with "AST constructor recursion depth
    mismatch". The product retrieves its own futures' failures; this keeps a test's verdict
    about the code, not about what an earlier test left for the collector.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        if enabled:
            gc.enable()
