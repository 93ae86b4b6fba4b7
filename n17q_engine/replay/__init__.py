"""The replay loop (DESIGN §5, §6): one portable replay package in, one run bundle out.

`run_replay(package, isolation=...)` reads a `ReplayPackage` and returns a `ReplayOutput` (a manifest, the
events as JSON lines, the blobs) that imports like any run. `sandbox_main` is the same thing as the sandbox
child's entry point (`n17q_engine.replay:sandbox_main`): the package arrives in wire form on stdin, the
output leaves on stdout. Nothing here reads process time, randomness, the environment (except the isolation
level the launcher wrote), the network or a database, so one package gives byte-identical logs.

Modes:

- `reconstruction` (exact): the source run's events re-projected, in order and unchanged (ids, times,
  origins), after a `replay.scope` note. No model, no tools, no world. The manifest names the run it
  `reconstructs`, so today's lineage checks judge the events as the run that recorded them.
- `rerun` (comparable) and `counterfactual` (experiment): a decider (`deciders.py`) proposes steps; the
  engine performs them against the scenario's contracts, fixtures, simulated world and policy. A
  counterfactual changes exactly one declared variable (`replay.json` `vary`) and runs in a child world.

What the engine does with a step, and the decisions behind it:

- **Tool calls** go through the scenario's contract (normalized, digested) and the fixture registry, with the
  world as it is now and the call's workspace visible as the pseudo-resource `call.workspace:<id>` (at that
  workspace's revision), so a fixture can select "this command in workspace two at overlay revision 2". An
  unknown tool, a request the contract refuses, a contract revision other than the recorded one,
  no match, or more than one match: `fixture.missing` / `fixture.ambiguous` with scenario, tool, contract
  revision, request digest, world revision and the latest checkpoint, then `run.state incomplete_test_world`.
  Never a placeholder, never a nearby fixture, never a live call: there is no live client to call.
- **Excluded tools** (the scenario version names them with reasons) are the declared scope, not a missing
  fixture: the call to an excluded read is recorded, its result says `outcome: unknown`, `evaluated: false`,
  `excluded {tool, reason}`, and the replay goes on. A call to an excluded mutation (or an excluded tool without a
  contract) stops the run as a missing fixture does (`fixture.missing` with `excluded {tool, reason}`, then
  `incomplete_test_world`): the world after it is not known. Observations, admissions and claims resting on an
  excluded read's result carry `unevaluated`; the scope note names the tool as uncovered.
- **Results** are labelled `origin: fixture`; a `produces: receipt` contract yields a `command.receipt` whose
  trees and environment come from the simulated workspace, not from the fixture. A fixture's `elapsed_s`
  advances the clock before the receipt; `termination_unknown` marks the workspace `uncertain`.
- **World transitions** of a mutation fixture change the simulated world and are recorded as
  `world.transition` (op create when it starts from absent, delete when its change is null, else update).
  A scenario (or counterfactual) `delay` holds them until scenario time passes (a provider's visibility
  window). A transition on `workspace:<id>` is also the `workspace.changed` of that workspace.
- **Effects**: the policy of the scenario (or the varied revision) judges an intent: approval required and
  none simulated → `needs_approval`; required purposes without admitted evidence for the artifact → `deny`;
  otherwise `allow`. Historical approvals are emitted as `approval.recorded` with `origin: historical` and
  the source run's identity, subject the replay's proposal, and are never authority. When the scenario says
  `approvals: simulated`, a recorded human decision is replayed as an `approval.recorded` with `origin:
  simulated`, binding the replay's own evidence set. The **final gate**, inside the activation step, builds
  the lineage graph of everything so far plus the approval, decision and intent about to be written and asks
  `intent_findings`; any error-severity finding turns the step into a `deny` naming the codes, and the intent
  is never written. An allowed intent gets the replay namespace `replay:<world>`, an idempotency key derived
  from the seed, the world (for a counterfactual, named from the branch basis) and the historical key (never the
  live key), and `historical_intent` naming the source.
- **Executions** go through the destination's mutation contract and fixture on connection
  `fixture:<tool>`. Fault stages (a scenario fault, a counterfactual `fault`, or a fixture's own
  `fault_stage`) apply once per request: `before_send` fails with no world change; `after_acceptance` and
  `before_receipt` mutate the world and lose the response; `after_world_mutation` and `during_response`
  mutate it with an unknown outcome; `after_local_commit` acknowledges and then interrupts the run. A second
  execution of an intent whose effect already happened is `rejected` (the simulated provider knows the key):
  at most one consequence per intent by construction.
- **Races** (seed 000, "Concurrency was recorded as behavior"; `concurrency.py`, docs/concurrency.md): when the
  scenario declares a race on the tool an effect executes through, the intent's first execution is carried out as
  the race's deliveries of the same request, following the declared schedule step by step (run a delivery to its
  barrier, run another, release the held one). Acceptance writes the provider's ledger entry keyed by the
  delivery's effect identity (`SimulatedWorld.accept_effect`): an identity already held is deduplicated (the
  delivery's execution is `rejected`), a new one is committed through the fixture that answers the world as it is
  at that moment. Every step taken is a `schedule.step` event: the schedule actually followed is evidence.
- **Time**: the logical clock starts at the scenario's `clock_start` (or the varied `clock`) and moves only
  by `clock.advanced`: to the recorded time of the step a decider replays (shifted with the clock), by a
  fixture's elapsed time, by a decider's wait, and at the end to let scheduled transitions settle. `at.wall`
  of every event is the launch instant from the package: the engine reads no clock, and the elapsed wall
  time is measured by the launcher and stored beside the run, so the log itself stays deterministic.
- **Time-dependent rules** (issue 39; docs/packages.md "Time and negative observations") read the logical clock
  and nothing else: a fixture result carries `freshness` (its recording's age at the logical time, judged by the
  scenario's `freshness` rule for the tool: fresh, stale, or not_evaluated without a rule; a stale result is served
  as recorded), a policy rule's `quiet_hours` deny an effect while the clock is inside them and its
  `approval_expires_s` turns an approval older than that into `needs_approval`, each reason naming the rule and the
  logical time. A negative result (`empty`, `not_found`) carries `negative`: the query and corpus revision, or the
  consistency window and the world state, as the fixture declares them (`declared: false` when it does not).
- **Ids** of replay events are derived from the scenario seed and the replay's **branch basis** (`IdSource(seed,
  basis)`, counted per kind): `package.branch_basis` digests the recorded run (id and events), the branch point
  (checkpoint or start) and what the replay varies (mode, vary, a rerun's decider), never the replay's own id, run
  id or launch instant (issue 36). The counterfactual's world (`<world>.cf-<basis hex>`, hence its namespace and
  idempotency keys) and synthetic tokens derive from it too, so two replays of one branch that make the same
  decisions hand an agent the same values and write the same log except for what names the replay itself
  (manifest `run.id`, `run.created_at`, `run.replay.id`, `run.replay.package`; every event's `at.wall`, the scope
  note's `package`, a simulated approval's `run`; docs/agents.md "Determinism"). Attempt, workspace and artifact ids
  keep their recorded names so the comparison can pair them.
- **The scope note** (`replay.scope`, first event) is computed from the manifest alone: scenario version,
  scope, fixture world and its digest, recording dates, synthetic fixtures, and what is uncovered (declared,
  excluded tools with reasons, contracts without a fixture).
- **Invariants** declared by the scenario are checked on the log at the end and reported on the final
  `run.state` (`invariants`); a violated one makes a run that otherwise completed `failed`.

Issue 19 (additive; docs/decisions.md "Issue 19 — budgets, hostile text, synthetic tokens"):

- **Budgets** are cumulative across attempts: every `budget.charged` adds to one running total per resource,
  whichever attempt it is in. The replay's own work is charged too (`origin: replay`, `cause` the event that
  did it): a turn for each proposal a decider makes of its own, and a rerun command's `elapsed_s` as compute,
  so a counterfactual's extra validation has a price. A charge made in an attempt started to recover from
  another (`parent_attempt_id`) is a recovery (`recovery: true`). Against the scenario's `budget` (or a
  counterfactual's `budget.<resource>`): spending past the limit stops the run; ordinary (not recovery) spending
  that would dig into the declared recovery reserve stops it too, each with the numbers and the charge that did
  it. The final `run.state` carries `budget` {resource: spent, replay_own, recovery, limit, recovery_reserve}.
- **Refused tools**: a `refused_tools` invariant names tools no replay may use (a mode switch, an environment
  or configuration write, a live retry). A call to one is answered by the world with `outcome: denied` and
  `refused` {invariant, reason, attempt}, never looked up and never performed; the call after the tolerated
  `max` stops the run `failed`, naming the invariant. There is nothing else to refuse: no action carries an
  environment, a mode, an isolation level or a connection, and the View has no setter (tests prove both).
- **Synthetic tokens**: the scenario's `grants` are issued to each replay as synthetic tokens
  (`world.synthetic_token`, derived from seed, branch basis and grant). A call to a tool of `authorized_tools` carries
  `authorization` {decision, grant, account, scope, synthetic, token_fingerprint}: the scope identity is
  evidence, the material is not recorded. A call on an account no grant covers is denied by the world
  (`tool.result outcome: denied`, no fixture consulted, no world change), and the replay goes on.

The package's modules hold one concern each, and each imports only the ones below it (an import-linter contract
in pyproject.toml keeps the direction):

- `loop.py`: `run_replay`, the sandbox entry `sandbox_main`, and a rerun's or counterfactual's run (`_Engine`):
  the scope note, the decider loop, the final `run.state` (invariants, budget) and the manifest.
- `branching.py`: restoring the recorded history before a branch's checkpoint; the scope note's `segment`.
- `steps.py`: `perform` and the table of handlers; attempts, workspaces, proposals, artifacts, evidence, human
  input, claims, charges, checkpoints, waits and stops.
- `effects.py`: approvals, policy decisions, effect intents and the final gate, executions, raced deliveries.
- `calls.py`: tool calls through contracts and fixtures (faults, world transitions, refusals, exclusions, receipts)
  and the `incomplete_test_world` stop for what the fixture world lacks.
- `state.py`: the engine's state: its set-up from the package and the declared variation (the branch point, what
  applies now), the View deciders read, emitting, the clock, the budget, stopping.
- `output.py`: `ReplayOutput` (its wire form, a bundle on disk), the log, the manifest's `run`, a reconstruction.
"""

from .calls import JSON, TEXT
from .loop import ISOLATION_ENV, TRUTH, run_replay, sandbox_main
from .output import OUTPUT_MAGIC, ReplayError, ReplayOutput, iter_output_events
from .steps import PROGRESS_EVERY

__all__ = [
    "ISOLATION_ENV",
    "JSON",
    "OUTPUT_MAGIC",
    "PROGRESS_EVERY",
    "TEXT",
    "TRUTH",
    "ReplayError",
    "ReplayOutput",
    "iter_output_events",
    "run_replay",
    "sandbox_main",
]
