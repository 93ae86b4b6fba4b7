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
        "extracted claim",
        "A validation, completion or effect claim the importer read from the final answer's prose (an OpenTelemetry "
        "trace, an Inspect log) by fixed rules, linked to the receipts and results it speaks about and judged like a "
        "stated one; shown as extracted, not stated (docs/claims.md).",
    ),
    (
        "carried forward",
        "Evidence observed in an earlier attempt that a retry admitted again: justified only under a compatibility "
        "rule the policy declares whose recorded facts hold. The attempt view says, evidence by evidence, what "
        "carried forward, what was rerun, what went stale (its workspace left the active state or its tree moved on) "
        "and what needs a rerun.",
    ),
    (
        "assessment",
        "A qualitative reviewer's score (1..5) of one dimension of a run (code clarity, diagnostic reasoning, report "
        "usefulness, path economy) citing the events and artifacts it rests on, by a person or a model reviewer "
        "behind an approved model connection. Shown beside the verdict, never averaged into it: a high score cannot "
        'override a lineage finding, and a run without one says "not reviewed".',
    ),
    (
        "review surface",
        "What an approver saw of one intent, rebuilt from the recording as it stood at the approval (seeds 001 and "
        "003): the requested effect and its identity, the artifact and the workspace lineage, the required "
        "validation receipts with their trees and completion, the unresolved failures, the policy decision, and "
        "the evidence-set digest the approval binds. Read-only: a historical approval is shown as evidence, never "
        "as authority (/runs/<run>/approvals/<event>/).",
    ),
    (
        "waiting on a person",
        "A policy decision with outcome needs_approval that no approval of its own run answers yet (a historical "
        "approval, or one from another run or environment, does not answer it); listed across runs at "
        "/approvals/pending/.",
    ),
    (
        "tool catalogue",
        "The tools a model or decider was offered at a proposal (names, descriptions, input schemas), held as a blob "
        "the model.proposal names in tools_blob; a replay records the scenario's tools it offered its decider, an "
        "imported trace keeps the definitions its producer recorded.",
    ),
    (
        "fixture version",
        "One fixture exactly as a scenario version holds it, named by its id and the digest of its content; each "
        "replay checkpoint names the scenario version and the fixture versions that had answered by then.",
    ),
    (
        "required value",
        "A value of a tool's answer a scenario version says it needs (scenario.json required_values: tool, path, "
        "reason). A fixture answering with it absent, redacted, unavailable or not applicable, or an excluded tool "
        "whose value is required, stops the replay as an incomplete test world: never an empty or unknown "
        "placeholder to go on with (seed 000: unknown fixture data stayed unknown). What an answer lacks reaches an "
        "agent as its absent markings, the same bounded absence the record holds.",
    ),
    (
        "client built",
        "A sandbox violation (attempted: client): a network client was constructed inside a replay's sandbox (a "
        "socket of an internet family, or an HTTP, FTP or mail client) and the run stopped there, even though no "
        "request followed (seed 000: replay failed if any constructor ran).",
    ),
    (
        "agent context",
        "What an agent in a replay was told of its task and where it stands (an agent.context event: the task "
        "document's digest and a blob with the document and the prompt's words): the workspace to work in, each "
        "receipt's exact suites and whether it completed, partial or timed-out evidence marked as such, and the "
        "suites that need a rerun there, with why (seed 003: the fix worked without a better model).",
    ),
    (
        "inherited state",
        "What a workspace took over from another or from elsewhere (workspace.created inherited: caches, processes, "
        "layers). Only a trusted immutable dependency layer (marked trusted, named by a sha256 digest) may be "
        "inherited; anything else is a finding (LIN016).",
    ),
    (
        "test paths",
        "The paths that are the repository's tests (test folders and files by default; a task or scenario may name "
        "its own globs). An agent's change to them is a finding (LIN017) unless the task requires test changes.",
    ),
    (
        "stale read",
        "A read a race's schedule takes while a delivery is held after the provider accepted it: it observes the "
        "world before that effect, and its schedule.step says so (stale, pending). Two reads either side of a commit "
        "seeing two revisions are a read race (seed 000, docs/concurrency.md).",
    ),
    (
        "outbox",
        "Where an activated effect intent waits for delivery: written in the same local transaction as the final "
        "gate's allow and the intent (an effect.outbox event), all or nothing; a delivery reads only the outbox "
        "(seed 003, docs/outbox.md).",
    ),
    (
        "freshness",
        "How old a fixture's recording is at the replay's logical time, judged by the scenario version's freshness "
        "rule for the tool (max age): fresh, stale, or not evaluated when there is no rule. A stale result is still "
        "served as recorded: historically faithful and currently stale at once (seed 000). Never the wall clock.",
    ),
    (
        "logical time",
        "Scenario time: the replay's clock, started where the scenario or checkpoint says and moved only by "
        "clock.advanced events. Policy (quiet hours, approval expiry) and freshness read it; wall time (how long the "
        "sandbox ran) is reported apart and decides nothing (seed 001).",
    ),
    (
        "negative observation",
        "A fixture's empty, not_found, denied or deleted answer: evidence about the simulated world, not a missing "
        "fixture. An empty search names its query and corpus revision, a not_found its consistency window and the "
        "world state it was observed in (the result's negative scope); a fixture that declares none says so.",
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
