"""How many examples a property test runs: bounded in `make test`, in full in `make test-deep`.

A property test names the count its author judged thorough, `@settings(max_examples=examples(300))`. Under the
"bounded" profile (the default: `make test` and CI) it runs a quarter of that, at least 20, so the suite's time does
not grow with every property written; under "deep" (`make test-deep`, HYPOTHESIS_PROFILE=deep) it runs the full
count, and at least 500. tests/conftest.py registers and loads the profiles.
"""

from __future__ import annotations

import os

BOUNDED_SHARE = 4
BOUNDED_FLOOR = 20
DEEP_FLOOR = 500


def deep() -> bool:
    return os.environ.get("HYPOTHESIS_PROFILE", "bounded") == "deep"


def examples(full: int) -> int:
    if deep():
        return max(full, DEEP_FLOOR)
    return min(full, max(BOUNDED_FLOOR, full // BOUNDED_SHARE))
