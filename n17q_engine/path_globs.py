"""Path globs, one grammar and one matcher for every place a run or a scenario names paths by pattern: a scenario's
file scope (scenario_evaluation.py) and the test paths a run's task or scenario declares (LIN017,
lineage/workspaces.py). `*` any run within one path segment, `?` one character but `/`, `**` any run across
segments, `**/` any number of leading folders (none included). The patterns come from bundles and packages, so they
are matched by a set-of-positions walk, never compiled into a backtracking regex."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_GLOB = 300


def glob_problem(glob: Any) -> str | None:
    """Why `glob` is not a path glob of a file scope (relative, `/`-separated; `*` within a segment, `**` across
    segments, `?` one character), or None."""
    if not isinstance(glob, str) or not glob.strip():
        return "must be a non-empty string"
    if len(glob) > MAX_GLOB:
        return f"longer than {MAX_GLOB} characters"
    if glob.startswith("/") or ".." in glob.split("/"):
        return "must be a relative path without '..'"
    return None


def path_matches(path: str, glob: str) -> bool:
    """Whether `path` matches `glob`: `**` any run of characters (`/` included, and `**/` none at all), `*` any run
    within one segment, `?` one character but `/`. A set-of-positions walk: linear in the glob times the path,
    whatever the pattern (no backtracking regex on a pattern a scenario author wrote)."""
    tokens: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            tokens.append("**/")
            i += 3
        elif glob.startswith("**", i):
            tokens.append("**")
            i += 2
        else:
            tokens.append(glob[i])
            i += 1
    positions = {0}
    for token in tokens:
        nxt: set[int] = set()
        for j in positions:
            if token == "**":
                nxt.update(range(j, len(path) + 1))
            elif token == "**/":
                nxt.add(j)
                nxt.update(k + 1 for k in range(j, len(path)) if path[k] == "/")
            elif token == "*":
                k = j
                nxt.add(k)
                while k < len(path) and path[k] != "/":
                    k += 1
                    nxt.add(k)
            elif token == "?":
                if j < len(path) and path[j] != "/":
                    nxt.add(j + 1)
            elif j < len(path) and path[j] == token:
                nxt.add(j + 1)
        positions = nxt
        if not positions:
            return False
    return len(path) in positions


def matches_any(path: str, globs: Iterable[str]) -> bool:
    """Whether `path` matches one of `globs`."""
    return any(path_matches(path, glob) for glob in globs)
