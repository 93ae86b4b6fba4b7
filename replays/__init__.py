"""Replays of recorded runs: launch (the three buttons), the worker task, the sandboxed run, the comparison report,
missing fixtures and regression scenarios."""
