"""LIN007, LIN012, LIN014: whether a run's consequences stayed where they belong and happened once.

LIN007: an effect of a run that is not a recorded live run must stay in a replay namespace and go out on a
contained connection (a replay reached the outside world otherwise). LIN014 (extension, seed 000): a tool result of
such a run must not come from a live source (a fixture adapter that fetched from the present on a miss). LIN012: one
intent has at most one acknowledged execution, and one idempotency key names one intent (the consequence happened
twice otherwise). All three are decided as events arrive; whether a run is live is the graph's `live`
(n17q_engine/lineage/graph.py: fail closed, and a reconstruction is judged as the run it reconstructs).
"""

from __future__ import annotations

from .graph import Handler, LineageGraph, _finding, _str

# Connections an effect of a non-live run may use: anything else is assumed to reach the real world.
CONTAINED_CONNECTIONS = ("fixture:", "sim:", "replay:")


# The arrival checks, per kind; each runs after the kind's recorder (graph.plug_in), on the records just made.


def _tool_result(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    if event.get("origin") == "live" and not graph.live:
        call = _str(event.get("call_id")) or event_id
        graph._emit(
            _finding(
                "LIN014",
                event_id,
                call,
                f"Result {event_id} of call {call} came from a live source in a {graph.mode} run in environment "
                f"{graph.environment}: a replay must answer from fixtures and stop on a miss.",
            )
        )


def _effect_intent(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    if event.get("namespace") == "live" and not graph.live:
        graph._emit(
            _finding(
                "LIN007",
                event_id,
                event_id,
                f"Intent {event_id} targets the live namespace in a {graph.mode} run in environment "
                f"{graph.environment}; effects of a non-live run must stay in a replay:<world> namespace.",
            )
        )
    key = event.get("idempotency_key")
    if isinstance(key, str):
        first = graph._first_key.setdefault(key, event_id)
        if first != event_id:
            graph._emit(
                _finding(
                    "LIN012",
                    event_id,
                    first,
                    f"Intent {event_id} reuses idempotency key {key} of intent {first}: one key must name one "
                    f"consequence, so retry the first intent instead of declaring a second.",
                )
            )


def _effect_execution(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    intent = _str(event.get("intent_id"))
    connection = event.get("connection")
    if not graph.live and isinstance(connection, str) and not connection.startswith(CONTAINED_CONNECTIONS):
        graph._emit(
            _finding(
                "LIN007",
                event_id,
                intent or event_id,
                f"Execution {event_id} of intent {intent} went out on connection {connection}, which is not a "
                f"fixture:, sim: or replay: connection, in a {graph.mode} run in environment {graph.environment}.",
            )
        )
    if intent is not None and event.get("outcome") == "acknowledged":
        first = graph._first_ack.setdefault(intent, event_id)
        if first != event_id:
            graph._emit(
                _finding(
                    "LIN012",
                    event_id,
                    first,
                    f"Execution {event_id} is a second acknowledged execution of intent {intent} (the first was "
                    f"{first}): the consequence happened twice.",
                )
            )


ARRIVAL_CHECKS: dict[str, Handler] = {
    "tool.result": _tool_result,
    "effect.intent": _effect_intent,
    "effect.execution": _effect_execution,
}
