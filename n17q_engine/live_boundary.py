"""The live boundary refuses replay keys (seed 001, "Effect identities received a replay namespace"): "Any adapter
receiving a replay-namespaced key while configured for a live connection rejected the request. Defence did not
depend on a single router decision."

A replay gives every effect an idempotency key and a namespace of its own world (`replay:<world>:…`, world.py's
`REPLAY_PREFIX`). Such a key must never reach the outside world: the lineage checker reports it afterwards (LIN007),
and every place that uses a live connection refuses it *before* anything is sent or kept, each on its own, whatever
routed the request there. The places (docs/live-boundary.md): the record policy (`fixtures_review.record_policy.admit`,
which every capture door passes: native captures, HAR/VCR recordings, a run's tool results and model calls) and the
worker's live model relay (`replays.relay.ModelRelay`).

`replay_keys_in(value)` finds, at any depth of a request (headers, body, arguments), a field named as an idempotency
key or an effect namespace (`Idempotency-Key`, `idempotency_key`, `X-Idempotency-Key`, `idempotencyKey`, `namespace`,
…) whose value is replay-namespaced. Only such named fields are read: a prompt or a tool result that merely mentions
a replay key is text, not a key the provider would act on.
"""

from __future__ import annotations

import re
from typing import Any

from .world import REPLAY_PREFIX

# Field names (lowercased, only letters and digits, a leading "x" header prefix dropped) that carry an effect's
# identity to a provider.
KEY_NAMES = frozenset({"idempotencykey", "idempotencytoken", "namespace", "effectnamespace", "idempotencynamespace"})
MAX_DEPTH = 32
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


class ReplayKeyRefused(ValueError):
    """A request for a live connection that carries a replay-namespaced key; the message is the one-line reason."""


def _key_name(name: str) -> str:
    plain = _NOT_ALNUM.sub("", name.lower())
    return plain[1:] if plain.startswith("x") and plain[1:] in KEY_NAMES else plain


def replay_keys_in(value: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, value) of every replay-namespaced key the request carries in a key-named field, in document order."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[str, Any, bool, int]] = [(path, value, False, 0)]
    while stack:
        where, item, named, depth = stack.pop()
        if isinstance(item, str):
            if named and item.strip().startswith(REPLAY_PREFIX):
                found.append((where, item.strip()))
        elif depth < MAX_DEPTH and isinstance(item, dict):
            children = []
            for name, child in item.items():
                child_named = named or (isinstance(name, str) and _key_name(name) in KEY_NAMES)
                children.append((f"{where}.{name}" if where else str(name), child, child_named, depth + 1))
            stack.extend(reversed(children))
        elif depth < MAX_DEPTH and isinstance(item, list | tuple):
            # Headers kept as [name, value] pairs name their key in the pair itself.
            if len(item) == 2 and isinstance(item[0], str) and _key_name(item[0]) in KEY_NAMES:
                stack.append((f"{where}[{item[0]}]", item[1], True, depth + 1))
                continue
            stack.extend(reversed([(f"{where}[{i}]", child, named, depth + 1) for i, child in enumerate(item)]))
    return found


def refuse_replay_keys(request: Any, *, connection: str, where: str = "request") -> None:
    """Raise ReplayKeyRefused when `request`, bound for the live connection `connection`, carries a replay key."""
    found = replay_keys_in(request, where)
    if found:
        path, key = found[0]
        raise ReplayKeyRefused(
            f"{path}: the replay-namespaced key {key[:80]!r} was bound for {connection}, a live connection: refused "
            "before anything was sent; a replay's effect identities never leave its simulated world"
        )
