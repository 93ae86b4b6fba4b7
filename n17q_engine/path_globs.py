"""Path globs, one grammar and one matcher for every place a run or a scenario names paths by pattern: a scenario's
file scope (scenario_evaluation.py) and the test paths a run's task or scenario declares (LIN017,
lineage/workspaces.py). `*` any run within one path segment, `?` one character but `/`, `**` any run across
segments, `**/` any number of leading folders (none included). The patterns come from bundles and packages, so they
are matched by a set-of-positions walk, never compiled into a backtracking regex."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
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


# Compiled globs kept (a glob's tokens and its literal head and tail): a run names a handful, a package a few dozen.
_COMPILED_KEPT = 1024
# Paths whose answer a `PathGlobs` keeps: past that, each is matched again (memory stays bounded whatever the run).
MEMO_PATHS = 4096
_WILD = frozenset({"**/", "**", "*", "?"})


@lru_cache(maxsize=_COMPILED_KEPT)
def _compile(glob: str) -> tuple[tuple[str, ...], str, str] | None:
    """The glob's tokens (`**/`, `**`, `*`, `?` or one literal character), and the literal characters it starts and
    ends with: a path that does not start with the one and end with the other cannot match, whatever the walk (a
    literal token matches exactly one character of the path, so the first and the last ones sit at its two ends).
    None for a glob without a wildcard: only the path equal to it matches (the walk's answer too)."""
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
    head = 0
    while head < len(tokens) and tokens[head] not in _WILD:
        head += 1
    if head == len(tokens):
        return None
    tail = len(tokens)
    while tokens[tail - 1] not in _WILD:
        tail -= 1
    return tuple(tokens), "".join(tokens[:head]), "".join(tokens[tail:])


def path_matches(path: str, glob: str) -> bool:
    """Whether `path` matches `glob`: `**` any run of characters (`/` included, and `**/` none at all), `*` any run
    within one segment, `?` one character but `/`. A set-of-positions walk: linear in the glob times the path,
    whatever the pattern (no backtracking regex on a pattern a scenario author wrote). The glob is tokenised once
    (`_compile`), and a path without its literal head or tail is answered without the walk."""
    compiled = _compile(glob)
    if compiled is None:
        return path == glob
    tokens, head, tail = compiled
    if not path.startswith(head) or not path.endswith(tail):
        return False
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


class PathGlobs:
    """A fixed list of globs asked about many paths (LIN017 asks the run's test paths about every file each artifact
    and workspace change names: the same few files again and again). Each distinct path is matched once and its
    answer kept, up to MEMO_PATHS paths; `matches(path)` is `matches_any(path, globs)`."""

    def __init__(self, globs: Iterable[str]) -> None:
        self.globs = tuple(globs)
        self._answers: dict[str, bool] = {}

    def matches(self, path: str) -> bool:
        answer = self._answers.get(path)
        if answer is None:
            answer = matches_any(path, self.globs)
            if len(self._answers) < MEMO_PATHS:
                self._answers[path] = answer
        return answer
