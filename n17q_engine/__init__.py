"""The N17Q engine: plain Python with no Django, database or network client inside.

Everything here works on the run bundle's own vocabulary (shared/DESIGN.md §3) so that the web
console, the CLI and the replay sandbox apply one set of rules. An import-linter contract in
pyproject.toml fails the build if this package imports Django, the apps, Celery, Redis or any
network client.
"""
