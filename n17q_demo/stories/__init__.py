"""The demo's recorded runs: the three seed stories (shared/seeds/) told as run bundles.

Each story becomes one or two runs in `n17q.run-bundle/1` that the console imports on `load_demo`. They are
generated, not checked in, so that they can never drift from the vocabulary: every event is built by one of
the small `_Recorder` helpers (`recorder`, one per event kind), the digests come from `canonical`, and the whole is
byte-for-byte deterministic (no clock, no randomness, no dict order that is not ours).

- `003_…` `run-003-review-request`: a review request opened on workspace two's artifact with workspace one's
  green focused test, while the broad suite's last word was one failure and a timeout.
- `001_…` `run-001-recorded`: the original live run; a reviewer narrows the audience, approves, one email goes out.
- `001_…` `run-001-naive-replay`: the old way of replaying it; messages fed back, the historical approval reused,
  a second real email.
- `000_…` `run-000-recorded`: a live research run; docs found, request req-7781 not found.
- `000_…` `run-000-fail-open-replay`: the fixture replay that failed open; the missing status fixture was
  fetched live.

One module per story (issue 31), each building its runs with the shared builder, never with another story (a
layers contract in pyproject.toml keeps it so): `story_003`, `story_001`, `story_000`; `recorder` builds the events
(`_Recorder`) and the run record (`_run`); `bundle` holds `StoryBundle` and `write_bundle`. This package lists the
runs in order (`demo_bundles`) and keeps every name its callers import from `n17q_demo.stories`.

Decisions worth knowing when reading the bundles:

- Times. `at.logical` is scenario time, `at.wall` is when the event was written. A live recording writes each
  event a moment after it happens, so wall trails logical by a constant latency. A fixture world runs faster
  than its scenario clock (the broad suite's 900 s timeout takes under a second of wall time, announced by a
  `clock.advanced`). A replay keeps the recorded logical times and has its own, later, wall times.
- Tree digests in the fixture world name a workspace's tree: they hash the workspace id with the content.
  Workspace two is content-equal to workspace one (`derived_from.content_equal` says so) and still has its own
  tree digest, as the 003 story has it ("it received a new workspace identity ... and tree digest"). Content
  equality is recorded, never inferred from a matching digest.
- Mutations that cross the boundary of the agent's world (a review request, an email) are recorded as
  `effect.intent` / `effect.execution`, not as `tool.call` / `tool.result`; reads and local edits are tool calls.
  A policy decision and an approval name the intent they judge as their `subject`; they come before the intent
  event, which then names the approval it relies on, so `subject` is the one forward reference in a run.
- Recorded live runs label their results `historical`, like the example bundle; the fixture world's are `fixture`.
- The naive replay of 001 reuses the original run's event ids: the old harness copied them, which is exactly why
  the historical approval's evidence-set digest still matched and only its origin gives it away (LIN005).
"""

from __future__ import annotations

from .bundle import StoryBundle, write_bundle
from .recorder import JSON, MODEL, TEXT
from .story_000 import _DOCS_HITS, STORY_000, _research_run
from .story_001 import STORY_001, _email_run
from .story_003 import _BROAD_OUTPUT, _FOCUSED_OUTPUT, _NOTES_OVERLAY, _PATCH, STORY_003, _review_request_run

__all__ = [
    "JSON",
    "MODEL",
    "STORY_000",
    "STORY_001",
    "STORY_003",
    "TEXT",
    "StoryBundle",
    "demo_bundles",
    "write_bundle",
]
# Private names the seed scenario packages read from here before the split (their homes are the story modules).
__all__ += ["_BROAD_OUTPUT", "_DOCS_HITS", "_FOCUSED_OUTPUT", "_NOTES_OVERLAY", "_PATCH"]


def demo_bundles() -> list[StoryBundle]:
    """Every demo run, the centre of the demo first and every parent before its replays."""
    return [
        _review_request_run(),
        _email_run(naive_replay=False),
        _email_run(naive_replay=True),
        _research_run(fail_open=False),
        _research_run(fail_open=True),
    ]
