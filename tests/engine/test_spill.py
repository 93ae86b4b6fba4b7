"""The checker's per-event state moves to disk past a bound (n17q_engine.spill, issue 20): the containers behave
exactly like the dicts they replace, and the checker's findings do not change when they spill."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from n17q_demo import stories
from n17q_engine import spill
from n17q_engine.lineage import LineageGraph
from n17q_engine.lineage import graph as lineage_graph
from n17q_engine.spill import MultiMap, SpilledIndex, SpilledMultiMap
from tests.hypothesis_budget import examples

_keys = st.sampled_from(["e-1", "e-2", "e-3", "é", "a b", "", "e-1 "])
_index_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), _keys, st.integers(-(2**63), 2**63 - 1)),
        st.tuples(st.just("get"), _keys | st.just(7), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=examples(60), deadline=None)
@given(start=st.dictionaries(_keys, st.integers(0, 10**6), max_size=4), ops=_index_ops)
def test_it_answers_like_a_dict_for_an_index(start, ops):
    _answers_like_a_dict(start, ops)


@settings(max_examples=examples(300), deadline=None)
@given(
    start=st.dictionaries(_keys, st.integers(0, 10**6), max_size=4),
    ops=_index_ops,
    pending_max=st.integers(1, 3),
)
@example(start={}, ops=[("set", "e-1", 1), ("set", "e-2", 2), ("set", "e-1", 3), ("get", "e-1", None)], pending_max=2)
def test_it_answers_like_a_dict_while_it_writes_batches(start, ops, pending_max):
    # Batches of one to three keys: every write, and the batch it keeps in memory afterwards, is exercised (a key
    # set again after its batch was written, asked for from memory, from the store, from both).
    saved = spill.PENDING_MAX
    spill.PENDING_MAX = pending_max
    try:
        _answers_like_a_dict(start, ops)
    finally:
        spill.PENDING_MAX = saved


def _answers_like_a_dict(start, ops):
    expected = dict(start)
    spilled = SpilledIndex(start.items())
    for op, key, value in ops:
        if op == "set":
            expected[key] = value
            spilled[key] = value
        else:
            assert (key in spilled) == (key in expected)
            assert spilled.get(key) == expected.get(key)
            assert spilled.get(key, "none") == expected.get(key, "none")
    assert list(spilled) == list(expected) and len(spilled) == len(expected) and bool(spilled) == bool(expected)
    for key in expected:
        assert spilled[key] == expected[key]
    with pytest.raises(KeyError):
        spilled["never-added"]


_multi_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), _keys, st.tuples(st.text(max_size=3), st.integers())),
        st.tuples(st.just("pop"), _keys, st.none()),
        st.tuples(st.just("replace"), _keys, st.lists(st.integers(), max_size=3)),
        st.tuples(st.just("ask"), _keys, st.none()),
    ),
    max_size=40,
)


@settings(max_examples=examples(60), deadline=None)
@given(ops=_multi_ops)
def test_it_answers_like_a_dict_of_lists_for_a_multimap(ops):
    expected = MultiMap()
    spilled = SpilledMultiMap([])
    for op, key, value in ops:
        if op == "add":
            expected.add(key, value)
            spilled.add(key, value)
        elif op == "pop":
            assert spilled.pop(key, None) == expected.pop(key, None)
        elif op == "replace" and value:
            expected[key] = list(value)
            spilled[key] = list(value)
        assert (key in spilled) == (key in expected)
        assert spilled.get(key, ()) == expected.get(key, ())
    # A key replaced keeps no order promise in a dict either once popped and re-added: compare as sets of keys,
    # and first-insertion order where no key was removed or replaced.
    assert set(spilled) == set(expected) and len(spilled) == len(expected) and bool(spilled) == bool(expected)
    if all(op == "add" or op == "ask" for op, _k, _v in ops):
        assert list(spilled) == list(expected)


def _findings(story, *, spill_after: int | None, monkeypatch) -> tuple[list, LineageGraph]:
    if spill_after is not None:
        monkeypatch.setattr(spill, "SPILL_AFTER", spill_after)
        monkeypatch.setattr(lineage_graph, "_SPILL_CHECK_EVERY", 1)
    graph = LineageGraph(story.manifest["run"])
    for event in story.events:
        graph.add(event)
    return list(graph.iter_findings()), graph


def test_it_finds_the_same_on_every_demo_story_when_the_state_is_on_disk(monkeypatch):
    spilled_somewhere = 0
    for story in stories.demo_bundles():
        in_memory, _ = _findings(story, spill_after=None, monkeypatch=monkeypatch)
        on_disk, graph = _findings(story, spill_after=2, monkeypatch=monkeypatch)
        monkeypatch.undo()
        assert on_disk == in_memory, story.story
        assert isinstance(graph._seq, SpilledIndex), story.story
        spilled_somewhere += isinstance(graph._found, SpilledMultiMap) + isinstance(graph._unresolved, SpilledMultiMap)
        assert {f.code for f in on_disk} == set(story.expected_codes), story.story
        # The questions the final policy gate asks are answered from disk as well.
        _, memory_graph = _findings(story, spill_after=None, monkeypatch=monkeypatch)
        for intent in [e["id"] for e in story.events if e["kind"] == "effect.intent"]:
            assert graph.intent_findings(intent) == memory_graph.intent_findings(intent), (story.story, intent)
    assert spilled_somewhere  # some story has findings or dangling references enough to move them too


def test_the_index_stays_exact_as_its_filter_grows(monkeypatch):
    # 20,000 keys: past the smallest filter's capacity (4,096 keys), so it is rebuilt from the store, twice over.
    monkeypatch.setattr(spill, "SPILL_AFTER", 2)
    index = SpilledIndex([(f"start-{i}", i) for i in range(3)])
    first = index._filter.capacity
    keys = [f"e-{i}" for i in range(20_000)]
    for i, key in enumerate(keys):
        index[key] = i
    assert index._filter.capacity > first >= 4096
    assert len(index) == 20_003 and list(index)[:4] == ["start-0", "start-1", "start-2", "e-0"]
    assert all(index.get(key) == i for i, key in enumerate(keys))
    assert not any(f"never-{i}" in index for i in range(5_000))
    # Moved to disk with more keys than the first filter holds: grown at once.
    moved = SpilledIndex((f"k-{i}", i) for i in range(10_000))
    assert moved._filter.capacity >= 10_000 and len(moved) == 10_000
    assert all(moved[f"k-{i}"] == i for i in range(10_000)) and "k-10000" not in moved


def test_a_filter_answering_maybe_to_every_key_changes_no_answer():
    # What the store answers is what counts: a filter full of ones (every key "maybe added") gives the same answers.
    index = SpilledIndex([("a", 1), ("b", 2)])
    index["c"] = 3
    index._filter._bits[:] = b"\xff" * len(index._filter._bits)
    assert index.get("a") == 1 and index.get("c") == 3 and "z" not in index and index.get("z", "none") == "none"
    index["z"] = 26
    assert len(index) == 4 and index["z"] == 26
