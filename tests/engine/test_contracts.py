"""Tool contracts: normalization fails closed, and a contract validates itself (DESIGN §5)."""

import json
import re
from typing import Any

import pytest

from n17q_engine import canonical
from n17q_engine.contracts import VOLATILE, Contract, ContractError, ContractSet, normalize, request_digest

# The example bundle's two tool calls and the digests it records for them.
DOCS_DIGEST = "sha256:c8a59f66638044b7a1a03bf901f0e67f47dd1944f908b062da8ade79e000ec70"
STATUS_DIGEST = "sha256:d0064125feea2092a54902591291a20cea6ad348d0db31dc7e270a343928c49e"


def docs_search(**over):
    data = {
        "tool": "docs.search",
        "revision": 1,
        "effect_class": "read",
        "fields": {
            "query": {"type": "string", "canonical": ["strip"]},
            "corpus": {"type": "string", "default": "public-docs", "canonical": ["strip", "lower"]},
            "limit": {"type": "integer", "default": 5},
            "tags": {"type": "array", "items": "string", "canonical": ["lower", "unique", "sort"], "required": False},
            "filters": {"type": "object", "required": False},
            "since": {"type": "string", "nullable": True, "default": None},
        },
        "transport": ["attempt_id", "trace_id"],
        "fault_stages": ["before_send", "during_response"],
        "outcomes": ["ok", "empty", "error", "timeout"],
    }
    data.update(over)
    return data


def status_lookup():
    return Contract.from_dict(
        {
            "tool": "status.lookup",
            "revision": 2,
            "effect_class": "read",
            "fields": {"request_id": {"type": "string", "canonical": ["strip", "lower"]}},
            "transport": ["attempt_id"],
            "outcomes": ["ok", "not_found"],
        }
    )


def error_of(contract, args) -> ContractError:
    with pytest.raises(ContractError) as info:
        normalize(contract, args)
    return info.value


def test_it_gives_the_example_bundles_digests():
    docs = Contract.from_dict(docs_search())
    normalized = normalize(docs, {"query": "rotate signing keys", "corpus": "public-docs", "limit": 5})
    assert normalized == {"query": "rotate signing keys", "corpus": "public-docs", "limit": 5, "since": None}
    # Without the nullable `since`, the request is exactly the example's.
    plain = Contract.from_dict(docs_search(fields={k: v for k, v in docs_search()["fields"].items() if k != "since"}))
    assert request_digest(normalize(plain, {"query": "rotate signing keys"})) == DOCS_DIGEST
    assert status_lookup().digest({"request_id": "req-7781"}) == ({"request_id": "req-7781"}, STATUS_DIGEST)


def test_it_resolves_defaults_and_canonicalizes():
    docs = Contract.from_dict(docs_search())
    got = normalize(docs, {"query": "  keys ", "corpus": " Public-Docs", "tags": ["B", "a", "b"]})
    assert got == {"query": "keys", "corpus": "public-docs", "limit": 5, "tags": ["a", "b"], "since": None}
    assert status_lookup().normalize({"request_id": " REQ-7781 "}) == {"request_id": "req-7781"}


def test_it_makes_one_key_for_one_meaning():
    docs = Contract.from_dict(docs_search())
    a = request_digest(normalize(docs, {"query": "keys", "tags": ["x", "y"], "filters": {"a": 1, "b": 2}}))
    b = request_digest(normalize(docs, {"tags": ["Y", "x"], "filters": {"b": 2, "a": 1}, "query": "keys ", "limit": 5}))
    assert a == b
    assert a != request_digest(normalize(docs, {"query": "keys", "tags": ["x", "y"], "limit": 6}))


def test_it_drops_transport_fields():
    status = status_lookup()
    plain = status.digest({"request_id": "req-7781"})
    assert status.digest({"request_id": "req-7781", "attempt_id": "a-9"}) == plain
    assert status.digest({"request_id": "req-7781", "attempt_id": "a-10"}) == plain


def test_it_refuses_an_unknown_field_naming_it():
    err = error_of(status_lookup(), {"request_id": "req-7781", "include_history": True})
    assert err.field == "include_history"
    assert "unknown field" in str(err)


def test_it_refuses_a_missing_required_field_naming_it():
    err = error_of(status_lookup(), {"attempt_id": "a1"})
    assert err.field == "request_id"
    assert "missing" in str(err)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"query": 5}, "query"),
        ({"query": "k", "limit": "5"}, "limit"),
        ({"query": "k", "limit": 5.0}, "limit"),
        ({"query": "k", "limit": True}, "limit"),
        ({"query": "k", "tags": "a"}, "tags"),
        ({"query": "k", "tags": ["a", 1]}, "tags[1]"),
        ({"query": "k", "tags": ["a", None]}, "tags[1]"),
        ({"query": "k", "filters": ["a"]}, "filters"),
        ({"query": "k", "filters": {"x": float("nan")}}, "filters.x"),
        ({"query": None}, "query"),
    ],
)
def test_it_refuses_a_wrong_type_naming_the_field(args, field):
    assert error_of(Contract.from_dict(docs_search()), args).field == field


def test_it_refuses_a_request_that_is_not_an_object():
    with pytest.raises(ContractError):
        normalize(status_lookup(), ["req-7781"])


def test_it_keeps_an_omitted_optional_field_omitted_and_a_null_null():
    docs = Contract.from_dict(docs_search())
    got = normalize(docs, {"query": "k", "since": None})
    assert "tags" not in got and "filters" not in got
    assert got["since"] is None


def test_it_does_not_alter_the_callers_arguments():
    docs = Contract.from_dict(docs_search())
    args = {"query": " k ", "tags": ["b", "a"], "filters": {"x": [1]}}
    got = normalize(docs, args)
    got["filters"]["x"].append(2)
    assert args == {"query": " k ", "tags": ["b", "a"], "filters": {"x": [1]}}


def test_it_changes_the_key_when_a_default_changes():
    old = Contract.from_dict(docs_search())
    new = Contract.from_dict(
        docs_search(revision=2, fields={**docs_search()["fields"], "limit": {"type": "integer", "default": 10}})
    )
    assert old.digest({"query": "k"})[1] != new.digest({"query": "k"})[1]


def test_it_round_trips_through_a_plain_dict():
    docs = Contract.from_dict(docs_search())
    again = Contract.from_dict(docs.to_dict())
    assert again.to_dict() == docs.to_dict()
    assert normalize(again, {"query": "k", "tags": ["B"]}) == normalize(docs, {"query": "k", "tags": ["B"]})
    canonical.canonical_json(docs.to_dict())  # JSON-able


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"fault_stages": ["before_send", "halfway"]}, "fault_stages"),
        ({"fault_stages": ["completed"]}, "fault_stages"),
        ({"fault_stages": ["after_world_mutation"]}, "fault_stages"),  # a read mutates nothing
        ({"outcomes": ["ok", "maybe"]}, "outcomes"),
        ({"outcomes": []}, "outcomes"),
        ({"effect_class": "write"}, "effect_class"),
        ({"revision": 0}, "revision"),
        ({"revision": "1"}, "revision"),
        ({"tool": ""}, "tool"),
        ({"fields": {"q": {"type": "str"}}}, "fields.q.type"),
        ({"fields": {"q": {"type": "array"}}}, "fields.q.items"),
        ({"fields": {"q": {"type": "string", "items": "string"}}}, "fields.q.items"),
        ({"fields": {"q": {"type": "integer", "canonical": ["lower"]}}}, "fields.q.canonical"),
        ({"fields": {"q": {"type": "string", "canonical": ["sort"]}}}, "fields.q.canonical"),
        ({"fields": {"q": {"type": "string", "canonical": ["titlecase"]}}}, "fields.q.canonical"),
        ({"fields": {"q": {"type": "integer", "default": "5"}}}, "fields.q.default"),
        ({"fields": {"q": {"type": "string", "default": "a", "required": True}}}, "fields.q.required"),
        ({"fields": {"q": {"type": "string", "canonicalize": ["strip"]}}}, "fields.q.canonicalize"),
        ({"fields": {"attempt_id": {"type": "string"}}}, "transport.attempt_id"),
        ({"transports": ["x"]}, "transports"),
    ],
)
def test_it_refuses_an_invalid_contract_naming_the_field(over, field):
    with pytest.raises(ContractError) as info:
        Contract.from_dict(docs_search(**over))
    assert info.value.field == field


def test_it_admits_after_world_mutation_for_a_mutation():
    contract = Contract.from_dict(docs_search(effect_class="mutation", fault_stages=["after_world_mutation"]))
    assert contract.fault_stages == ("after_world_mutation",)


def test_it_refuses_an_unknown_tool_in_a_contract_set():
    contracts = ContractSet([Contract.from_dict(docs_search()), status_lookup()])
    assert contracts.get("status.lookup").revision == 2
    with pytest.raises(ContractError) as info:
        contracts.get("web.fetch")
    assert info.value.field == "tool"
    assert "web.fetch" in str(info.value)


def test_it_refuses_a_tool_pinned_twice():
    with pytest.raises(ContractError):
        ContractSet.from_dicts([docs_search(), docs_search(revision=2)])


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [1.5, 1e16, -0.0, 2**70, True, None, 'é\u2028\x00\x1f"\\/'], "": {"z": {}, "y": []}},
        "just a string: ü \u0007",
        3.0,
        [],
        {"nan": float("nan"), "inf": [float("inf"), float("-inf")]},
        {"emoji 😀": "\U0001f600", "tab": "\t", "keys sort by code point": {"B": 1, "a": 2, "É": 3}},
    ],
)
def test_the_canonical_encoder_writes_exactly_what_json_dumps_writes(value):
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical.canonical_line(value) == expected + "\n"
    assert canonical.canonical_json(value) == expected.encode("utf-8")


def test_it_canonicalizes_a_default_like_a_value_the_agent_sent():
    # A default written " Public-Docs " must make the same key as an agent sending "public-docs": one meaning,
    # one fixture key, whoever filled the field in.
    fields = {
        **docs_search()["fields"],
        "corpus": {"type": "string", "default": " Public-Docs ", "canonical": ["strip", "lower"]},
    }
    docs = Contract.from_dict(docs_search(fields=fields))

    defaulted = normalize(docs, {"query": "keys"})
    sent = normalize(docs, {"query": "keys", "corpus": "public-docs"})

    assert defaulted["corpus"] == "public-docs"
    assert request_digest(defaulted) == request_digest(sent)


# --- volatile request parts (issue 36 point 2) ------------------------------------------------------------------

CHAT: dict[str, Any] = {
    "tool": "model.chat",
    "revision": 2,
    "effect_class": "read",
    "fields": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": "object"},
        "metadata": {"type": "object", "required": False},
        "seed": {"type": "integer", "required": False},
    },
    "transport": ["user"],
    "outcomes": ["ok"],
}


def chat_request(call_id: str, seed: int = 1, trace: str = "t-1") -> dict:
    return {
        "model": "m",
        "seed": seed,
        "metadata": {"trace": trace, "team": "mail"},
        "messages": [
            {"role": "user", "content": "send it"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function"}]},
            {"role": "tool", "tool_call_id": call_id, "content": "ok"},
        ],
    }


def test_a_declared_volatile_part_does_not_enter_the_digest_and_a_normalized_request_normalizes_to_itself():
    paths = ["messages[].tool_call_id", "messages[].tool_calls[].id", "metadata.trace", "seed"]
    chat = Contract.from_dict({**CHAT, "volatile": paths})
    one, digest = chat.digest(chat_request("call-1", seed=1, trace="t-1"))
    two, other = chat.digest(chat_request("call-9", seed=7, trace="t-9"))
    assert one == two and digest == other
    assert one["messages"][2]["tool_call_id"] == VOLATILE and one["messages"][1]["tool_calls"][0]["id"] == VOLATILE
    assert one["metadata"] == {"trace": VOLATILE, "team": "mail"} and one["seed"] == VOLATILE
    assert one["messages"][0] == {"role": "user", "content": "send it"}  # a message without the part is left alone
    assert chat.normalize(one) == one  # how a fixture's stored request is checked at load
    # what is not declared volatile still tells requests apart
    changed = chat_request("call-1")
    changed["metadata"]["team"] = "docs"
    assert chat.digest(changed)[1] != digest
    # declared only when declared: the dict (and so the scenario's digest) of a contract without it is unchanged
    assert Contract.from_dict({**CHAT, "volatile": paths}).to_dict()["volatile"] == paths
    assert "volatile" not in Contract.from_dict(CHAT).to_dict()
    plain = Contract.from_dict(CHAT)
    assert plain.digest(chat_request("call-1"))[1] != plain.digest(chat_request("call-9"))[1]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nothing.here", "'nothing' is not a field"),
        ("model.x", "'model' has no untyped parts"),
        ("seed[].x", "'seed' is not an array (integer)"),
        ("messages[]", "the items of 'messages' are typed"),
        ("messages..role", "a path is dotted names"),
        ("messages[0].role", "a path is dotted names"),
        ("tags[].x", "'tags' has no untyped parts"),
        ("sorted[].id", "sorted or deduplicated"),
    ],
)
def test_a_volatile_path_the_contract_cannot_honour_is_refused_naming_it(path, message):
    fields = {
        **CHAT["fields"],
        "tags": {"type": "array", "items": "string", "required": False},
        "sorted": {"type": "array", "items": "object", "canonical": ["unique"], "required": False},
    }
    with pytest.raises(ContractError, match=re.escape(message)) as caught:
        Contract.from_dict({**CHAT, "fields": fields, "volatile": [path]})
    assert caught.value.field == f"volatile.{path}"


def test_a_replay_whose_call_differs_from_the_fixture_only_in_a_volatile_part_is_answered_by_it():
    """The same path a model request takes (`model.chat` is a contract like any other): the scenario's contract
    normalizes the request before the lookup, so a part it declares volatile cannot make a miss."""
    from tests.engine import replaylib as rl
    from tests.engine.test_replay import final, kinds, replay

    search = {**rl.SEARCH, "fields": {**rl.SEARCH["fields"], "context": {"type": "object", "required": False}}}
    recorded = {**rl.search_request("keys"), "context": {"trace": "recorded-trace", "team": "docs"}}
    asked = {**rl.search_request("keys"), "context": {"trace": "another-trace", "team": "docs"}}
    manifest, events = rl.source_run([("docs.search", 1, asked)])

    def run(contract: dict) -> list[dict]:
        stored = Contract.from_dict(contract).normalize(recorded)
        sc = rl.scenario(contracts=[contract], fixtures=[rl.fixture("f-1", stored)])
        return replay(rl.replay_package(sc, manifest, events))[1]

    missed = run(search)
    assert final(missed)["state"] == "incomplete_test_world" and kinds(missed, "fixture.missing")
    answered = run({**search, "volatile": ["context.trace"]})
    assert final(answered)["state"] == "completed", final(answered)["reason"]
    (call,) = kinds(answered, "tool.call")
    assert call["request"]["context"] == {"trace": VOLATILE, "team": "docs"}
