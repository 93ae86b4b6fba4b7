"""Performance benchmarks for the budgets of DESIGN §9. See docs/benchmarks.md.

`python -m benchmarks.run` runs every `benchmarks/bench_<name>.py` module present; `python -m
benchmarks.run <name> ...` runs only those. They measure and report; they are not part of `make test`.
"""
