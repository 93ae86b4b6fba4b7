"""The console's vocabulary, for the glossary page (`/glossary/`): every lineage code (n17q_engine.lineage) and the
product terms the pages use, each with an anchor other pages link to (`{% url 'runs:glossary' %}#LIN014`)."""

from __future__ import annotations

from dataclasses import dataclass

from n17q_engine.lineage import CODES, EXPLANATIONS, WARNING_CODES


@dataclass(frozen=True)
class Entry:
    anchor: str
    term: str
    meaning: str
    severity: str = ""  # for a lineage code: "error" or "warning"


TERMS: tuple[tuple[str, str], ...] = (
    ("run", "An append-only event graph a harness recorded (or a replay wrote), with content-addressed blobs."),
    ("attempt", "One try at the task inside a run; a retry is a new attempt with its parent attempt named."),
    (
        "workspace",
        "A working tree an attempt runs commands in; derived from another by copy, reconstruction or "
        "branch, and ended by a lifecycle event (superseded, quarantined, uncertain, torn down).",
    ),
    ("receipt", "What a command did: its workspace, the trees before and after, its completion and results."),
    (
        "admission",
        "A receipt or result admitted as evidence for a policy purpose (validation:focused, say), "
        "for one artifact in one workspace and tree.",
    ),
    (
        "approval",
        "A decision by a person (or a simulated or historical one) that binds a set of evidence to an intent, and "
        "with it the intent's review object: what the approver was asked to release.",
    ),
    (
        "review object",
        "Everything an approval approves of one intent, computed from the run (seed 003): the effect (class, "
        "destination, idempotency key, parameters), the artifact (digest, workspace, tree), each admitted "
        "receipt's content (command, suites, completion, failures, trees), the policy revision and any expiry. "
        "Its digest is the approval's review digest; anything in it that changes before the intent is acted on "
        "invalidates the approval (LIN004), and the approval's detail shows what changed.",
    ),
    (
        "intent",
        "An external effect the run meant to cause (a send, a deploy), with its destination, artifact, "
        "admissions, approval and idempotency key.",
    ),
    (
        "origin",
        "Where a tool result came from: historical (the recording), fixture (a reviewed fixture), "
        "derived (computed from them), live (the present: never in a replay).",
    ),
    ("absent", "What a result lacks and why: absent, redacted, unavailable or not_applicable."),
    ("fixture", "A reviewed, immutable answer to one normalized request of one tool contract."),
    (
        "scenario version",
        "An immutable set of fixtures, contracts, a simulated world and policies that replays run against.",
    ),
    (
        "staged recording",
        "A captured tool response after redaction and secret scanning, waiting for review; "
        "never used by a replay until approved into a fixture version.",
    ),
    (
        "four eyes",
        "Whoever wrote any part of a recording's content (captured it, owned the capturing token, "
        "copied it similar, synthesized or redacted a value in it) cannot approve it.",
    ),
    (
        "masked secret",
        "A value the secret scan found and replaced with [masked:<rule>] before anything was "
        "stored; only its rule, place and a preview are kept.",
    ),
    ("reconstruction", "A replay that reproduces the recorded run against its scenario version."),
    ("rerun", "A replay that runs the task again in the sandbox against fixtures and the simulated world."),
    ("counterfactual", "A replay that changes exactly one declared variable and compares the outcome."),
    ("incomplete test world", "A replay that stopped on a missing fixture instead of reaching a live service."),
    (
        "facts",
        "What a run's events say happened, computed once when the run is stored and read by every page: effects "
        "(intents, executions, deliveries per intent and destination), validations (per purpose: completed, "
        "failed, unfinished, cited), workspaces, approvals and what they bind, the outcome (docs/facts.md).",
    ),
    (
        "delivery",
        "A change in the world caused by an intent (by the intent, one of its executions, or a race step naming "
        "it), other than the provider's ledger of accepted requests. More than one per intent is a duplicate "
        "consequence (LIN012).",
    ),
    (
        "validation complete",
        "Every suite's latest receipt in every workspace completed without an unwaived failure, and every "
        "required validation purpose has a receipt; a replay also owes what its source's policy required.",
    ),
    (
        "source title",
        "A replay's run is named from its own facts (mode, source, what it delivered, validation, state); the "
        "title of the run it replays stays that run's, shown beside it.",
    ),
    (
        "isolation",
        "How a replay's sandbox was bounded: netns (its own namespaces, nothing of the host) or degraded (no "
        "network namespace: allowed only for development, never with production settings, and shown as "
        '"isolation: none" in red on the run, the replay and the comparison).',
    ),
    (
        "fresh comparison run",
        "A run whose agent's model answered live through an approved model connection (its calls recorded as "
        "live results): not a replay and not reproducible, since nothing guarantees the same answers again. "
        "Chosen apart from the counterfactual's diagnostic variables, and labelled on every page that shows it.",
    ),
    (
        "annotation",
        "What a reviewer adds to a run after it ran (issue 38): a score (a named value on a scale, correctness 0.8 on "
        "0..1 or pass on pass/fail), a label (a tag) or a comment, on the run, one of its events (a span of an "
        "imported trace is its event) or a lineage finding. Appended to the run as an annotation.recorded event naming "
        "its author, role and time; never edited: a change of mind is a later annotation that supersedes it "
        "(docs/annotations.md).",
    ),
    (
        "correction",
        "A reviewer's statement that a recorded fact of one event was otherwise (this result's outcome was error, "
        "this evidence was stale): an annotation.correction event naming the event and field, the value recorded and "
        "the value corrected, its basis (the events it rests on), its author and time (seed 001: corrections named "
        "their author, basis, and time). The event keeps what it recorded; the facts, findings and verdict read the "
        "recorded value, and every page shows the correction beside it, never in its place.",
    ),
    (
        "supersede",
        "A later annotation or correction naming an earlier one it replaces (supersedes_id): both stay in the run; "
        "the earlier is shown struck through with the later one named.",
    ),
    (
        "end-state evaluation",
        "A replay's end judged against what its scenario version declares (seed 003, \"The scenario definition grew "
        "richer\"): its file scope (the path globs an artifact's files may fall in), its allowed effects (destinations "
        "and effect classes), its acceptable stop states (a run may be allowed to stop unfinished, say validation "
        "incomplete, and still fail if it completes). Each judgement is passed, failed or not evaluated, with the "
        "events it rests on; a check the scenario does not declare is not evaluated, never passed.",
    ),
    (
        "scope limit",
        "What a narrow replay cannot make claims about (seed 000): an adapter replay tests parsing one exchange, so "
        "earlier policy, later world state and the final account are not evaluated; a segment replay, from a "
        "checkpoint, judges earlier policy and the final account only on what it re-ran. The lineage checks they "
        "cover are listed as not evaluated on the replay's run, with the reason.",
    ),
    (
        "fixture body expired",
        "A fixture answers the request but holds its response body by digest, and retention removed the bytes (seed "
        "001): the replay stops as incomplete test world with a fixture.missing whose body_expired names the fixture, "
        "the digest, the retention class, when it was removed and the deletion record. Source material expired: "
        "nothing is served in its place, and the scenario version's digest is unchanged.",
    ),
)


def glossary_entries() -> list[Entry]:
    codes = [
        Entry(code, f"{code}: {title}", EXPLANATIONS[code], "warning" if code in WARNING_CODES else "error")
        for code, title in CODES.items()
    ]
    terms = [Entry("term-" + term.replace(" ", "-"), term, meaning) for term, meaning in TERMS]
    return codes + terms
