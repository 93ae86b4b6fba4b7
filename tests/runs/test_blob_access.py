"""Every reader of a run's blob bytes goes through runs.blob_access (issue 33: retention per holder).

The run's own hold decides whether it is served its bytes; a reader that opened the store by digest served a run
bytes another run still held after its own hold had ended. This walks the console's code for anything that opens
the blob store and holds it to the one module that decides by the run's hold, and the one that decides by a staged
recording's own record (fixtures_review.body_access: the recording page's preview and its body download), and the
one that decides by a fixture's own hold (fixtures_review.scenarios: the bodies promoted fixtures hold by digest).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("runs", "replays", "fixtures_review", "otlp_receiver", "console", "accounts", "n17q_demo", "n17q_site")
# fixtures_review/scenarios.py: the one resolver of fixture bodies held by digest, which decides by the fixtures' own
# holds (FixtureBodyHold) and their deletion records, never by whether the store has the file (seed 001).
ALLOWED = {"runs/blob_access.py", "fixtures_review/body_access.py", "fixtures_review/scenarios.py"}
# Opening the blob store: `storages["blobs"].open(…)`, or a name bound to it (`store = storages["blobs"]`) opened.
STORE = re.compile(r"""(\w+)\s*=\s*storages\[["']blobs["']\]""")


def _opens_the_store(text: str) -> bool:
    if re.search(r"""storages\[["']blobs["']\]\.open\(""", text):
        return True
    return any(re.search(rf"\b{name}\.open\(", text) for name in STORE.findall(text))


def test_only_blob_access_opens_a_runs_bytes():
    found = sorted(
        str(path.relative_to(ROOT))
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and _opens_the_store(path.read_text())
    )
    assert set(found) <= ALLOWED, f"these open the blob store outside runs.blob_access: {set(found) - ALLOWED}"
    assert {"runs/blob_access.py", "fixtures_review/body_access.py"} <= set(found)  # the walk sees the ones that do
