"""The lineage checker (DESIGN §4): which edges of a run's evidence graph are broken, and why.

An external effect may reference an artifact only when every required validation receipt was produced on
that artifact's workspace and tree (or an explicitly recorded compatible ancestor), no later workspace
event invalidated it, failures are resolved or waived, policy allows it, and approval binds the exact
evidence set. Each code is one way that sentence can be false; a finding names both ends of the
broken edge and says, in one sentence, what a reviewer should do.

Shape of the work: `LineageGraph.add` is called once per validated event in `seq` order and keeps only
compact records of the fields the rules read (never the event dicts, so 100,000 events stay small), plus
id→seq maps and the references nothing answered yet. Rules that only need the past (LIN007, LIN009,
LIN010, LIN012, LIN014) are decided as events arrive; the rest are resolved when findings are asked for,
because a bundle may refer forward (DESIGN §3 imports such references and reports the dangling ones).
Every resolved rule is computed per "from" event, so `intent_findings` (the final policy gate's question,
asked before activating one intent) looks only at that intent's neighbourhood instead of the whole run.

The package, one concern a module (issue 31; `lint-imports` keeps the layers: checks above the families, the
families independent of one another, all above graph, graph above codes):

- `codes.py`: the codes, what each finding means, which are warnings, what each reads (`unevaluated_checks`).
- `graph.py`: `LineageGraph`, its compact records and id maps, `Finding`; the lineage walk and waivers the families
  share. It imports no rule.
- `evidence.py`: LIN001, LIN002, LIN003, LIN006, LIN013, whether the evidence used fits the artifact.
- `approvals.py`: LIN004, LIN005, whether the approval is this run's, of exactly this evidence.
- `effects.py`: LIN007, LIN012, LIN014, whether consequences stayed contained and happened once.
- `workspaces.py`: LIN009, LIN010, whether the workspace was fit to use and the work the attempt's own.
- `references.py`: LIN011, dangling references.
- `claims.py`: LIN008, LIN015, whether a claim is what its evidence and its artifact's history say.
- `checks.py`: the orchestration, which rules judge which event, plugged into the graph; `check_events`.

Decisions taken where DESIGN §4 is silent (the project docs cite these lists): each module's docstring lists those
about its rules. Where to find them:

- `deny` decisions authorize nothing (LIN001, LIN005, LIN006): checks.py.
- LIN001 and the compatibility rules, LIN006 under a compatibility rule: evidence.py.
- The "artifact's lineage" (LIN003, LIN008, LIN015), what a receipt is "for", waivers, what `intent_findings`
  covers, a reconstruction judged as the run it reconstructs: graph.py.
- LIN008's scope, LIN015 (extension), claims left unevaluated by a replay: claims.py.
- LIN009 and an observation of a record made before the workspace became uncertain: workspaces.py.
- `unevaluated()` (DESIGN §10) and REQUIRED_INPUTS: codes.py.
"""

from __future__ import annotations

from .checks import check_events
from .codes import CODES, EXPLANATIONS, REQUIRED_INPUTS, WARNING_CODES, claim_is_judged, unevaluated_checks
from .effects import CONTAINED_CONNECTIONS
from .graph import (
    INVALIDATING_STATES,
    LIVE_ENVIRONMENTS,
    MAX_LINEAGE_DEPTH,
    UNKNOWN_TREE,
    VALIDATION_PREFIX,
    Finding,
    LineageGraph,
)

__all__ = [
    "CODES",
    "CONTAINED_CONNECTIONS",
    "EXPLANATIONS",
    "INVALIDATING_STATES",
    "LIVE_ENVIRONMENTS",
    "MAX_LINEAGE_DEPTH",
    "REQUIRED_INPUTS",
    "UNKNOWN_TREE",
    "VALIDATION_PREFIX",
    "WARNING_CODES",
    "Finding",
    "LineageGraph",
    "check_events",
    "claim_is_judged",
    "unevaluated_checks",
]
