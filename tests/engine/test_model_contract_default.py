"""model.chat's built-in contract (issue 36, docs/agents.md "Model fixtures"): every scenario allows agents. Where a
scenario pins no `model.chat` contract the built-in one (MODEL_CONTRACT, its revision stable) normalizes an agent's
model request; a contract the scenario pins wins; no other tool has a built-in contract."""

from __future__ import annotations

import copy

from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL, builtin_contract, contract_for
from n17q_engine.contracts import Contract, ContractSet


def test_the_built_in_contract_is_model_contract_and_its_revision_is_stable():
    built = builtin_contract(MODEL_TOOL)
    assert built == Contract.from_dict(MODEL_CONTRACT)
    assert built.revision == MODEL_CONTRACT["revision"] == 1
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "transport", "n": 1}
    assert builtin_contract(MODEL_TOOL).digest(request) == built.digest(request)  # same key every time it is built
    assert built.digest(request)[0] == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_pinned_model_contract_wins_and_no_other_tool_has_a_built_in_one():
    assert contract_for(ContractSet.from_dicts([]), MODEL_TOOL) == Contract.from_dict(MODEL_CONTRACT)
    own = copy.deepcopy(MODEL_CONTRACT)
    own["revision"] = 2
    assert contract_for(ContractSet.from_dicts([own]), MODEL_TOOL).revision == 2
    assert contract_for(ContractSet.from_dicts([]), "tickets.search") is None
    assert builtin_contract("tickets.search") is None
