"""Budget (DESIGN §9): fixture lookup O(1), median under 20 µs at 100,000 fixtures, and at least 100x faster
than VCR.py's matcher at 1,000 entries, measured side by side in one run.

In process, nothing timed but the lookups:

- N17Q: `FixtureRegistry.from_dicts` loads N fixtures (the `--events` size, 100,000 at the budget's scale)
  over four tool contracts, each fixture checked against its contract as a scenario package would be; one
  in four carries a world condition (the resource must be absent), so the filter runs on real candidates.
  `registry.lookup(tool, revision, digest, world)` is timed for probes drawn at random (fixed seed) from
  the recorded keys, in batches of 1,000 calls (a single call is too short for the clock); the figure is
  the median per-call time over the batches. The same is done at 1,000 fixtures (the O(1) check: the
  ratio should be about 1) and for misses (requests that were never recorded).
- VCR.py: a `vcr.cassette.Cassette` holding 1,000 recorded `vcr.request.Request`s (the same requests as
  the fixtures), with playback repeats allowed, in two setups: `query` (GET, the request in the query
  string, VCR's default matchers method, scheme, host, port, path, query) and `body` (POST with a JSON
  body, the default matchers plus `body`, which parses both JSON bodies per comparison).
  `cassette.play_response(request)` (VCR's real replay path: `_responses` runs `requests_match` against
  the entries in order until one matches, so half the cassette on average) is timed for fresh request
  objects equal to recorded ones, one call at a time.

The ratio is the faster VCR setup's median at 1,000 entries over N17Q's median at N fixtures.
"""

from __future__ import annotations

import gc
import json
import random
import time
from typing import Any

from n17q_engine.contracts import Contract
from n17q_engine.fixtures import DictWorld, FixtureRegistry, Hit, Miss

from .common import Config, median, row

NAME = "fixture_lookup"
LOOKUP_BUDGET_S = 20e-6
VCR_RATIO_BUDGET = 100.0
VCR_ENTRIES = 1000
BATCH = 1000
DEFAULT_REPEAT = 200  # batches of N17Q lookups; VCR probes are DEFAULT_REPEAT single calls
SEED = 17

TOOLS = {
    "docs.search": {
        "query": {"type": "string", "canonical": ["strip"]},
        "corpus": {"type": "string", "default": "public-docs"},
        "limit": {"type": "integer", "default": 5},
    },
    "status.lookup": {"request_id": {"type": "string", "canonical": ["strip", "lower"]}},
    "issue.get": {"project": {"type": "string", "canonical": ["lower"]}, "number": {"type": "integer"}},
    "files.list": {
        "path": {"type": "string"},
        "tags": {"type": "array", "items": "string", "canonical": ["unique", "sort"], "required": False},
    },
}


def contracts() -> list[Contract]:
    return [
        Contract.from_dict(
            {
                "tool": tool,
                "revision": 1 + i,
                "effect_class": "read",
                "fields": fields,
                "transport": ["attempt_id", "trace_id"],
                "outcomes": ["ok", "not_found", "empty", "denied"],
            }
        )
        for i, (tool, fields) in enumerate(TOOLS.items())
    ]


def request_for(tool: str, i: int) -> dict[str, Any]:
    if tool == "docs.search":
        return {"query": f"rotate signing keys {i}", "corpus": "public-docs", "limit": 5 + i % 3}
    if tool == "status.lookup":
        return {"request_id": f"req-{i}"}
    if tool == "issue.get":
        return {"project": f"n17q-{i % 97}", "number": i}
    return {"path": f"src/module_{i}.py", "tags": sorted({f"t{i % 5}", f"t{i % 7}"})}


def fixture_dicts(n: int, by_tool: dict[str, Contract]) -> list[dict[str, Any]]:
    tools = list(TOOLS)
    out = []
    for i in range(n):
        tool = tools[i % len(tools)]
        contract = by_tool[tool]
        item: dict[str, Any] = {
            "id": f"fx-{i:06d}",
            "tool": tool,
            "contract_revision": contract.revision,
            "request": request_for(tool, i),
            "response": {"outcome": "ok" if i % 5 else "not_found", "body": {"n": i, "items": [f"r{i}"]}},
            "provenance": {
                "recorded_at": "2026-07-01T09:00:00Z",
                "source_revision": f"src@{i % 13}",
                "connection": "bench",
                "synthetic": False,
                "fidelity_note": None,
            },
        }
        if i % 4 == 3:
            item["condition"] = {"resource": f"resource/{i}", "absent": True}
        out.append(item)
    return out


def time_lookups(
    registry: FixtureRegistry, probes: list[tuple[str, int, str]], world: Any, batches: int
) -> list[float]:
    """Per-call seconds, one figure per batch of BATCH calls."""
    lookup = registry.lookup
    per_call = []
    rng = random.Random(SEED)
    for _ in range(batches):
        start = rng.randrange(len(probes) - BATCH + 1) if len(probes) > BATCH else 0
        batch = probes[start : start + BATCH]
        gc.disable()
        t0 = time.perf_counter()
        for tool, revision, digest in batch:
            lookup(tool, revision, digest, world)
        elapsed = time.perf_counter() - t0
        gc.enable()
        per_call.append(elapsed / len(batch))
    return per_call


def n17q_at(n: int, batches: int) -> dict[str, Any]:
    cs = contracts()
    by_tool = {c.tool: c for c in cs}
    items = fixture_dicts(n, by_tool)
    t0 = time.perf_counter()
    registry = FixtureRegistry.from_dicts(items, cs)
    build_s = time.perf_counter() - t0
    world = DictWorld(revision=1)
    rng = random.Random(SEED)
    keys = [(it["tool"], it["contract_revision"], by_tool[it["tool"]].digest(it["request"])[1]) for it in items]
    probes = [keys[rng.randrange(n)] for _ in range(max(BATCH * 10, 1))]
    # Every probe must really hit: a benchmark of misses dressed as hits would flatter the figure.
    assert all(isinstance(registry.lookup(*p, world), Hit) for p in probes[:BATCH])
    hits = time_lookups(registry, probes, world, batches)
    unrecorded = [
        (tool, rev, by_tool[tool].digest(request_for(tool, n + i))[1])
        for i, (tool, rev, _d) in enumerate(probes[: BATCH * 2])
    ]
    assert all(isinstance(registry.lookup(*p, world), Miss) for p in unrecorded[:BATCH])
    misses = time_lookups(registry, unrecorded, world, max(10, batches // 4))
    # End to end for one call: normalize + digest + lookup (not the budget's figure; reported beside it).
    contract = by_tool["status.lookup"]
    args = [{"request_id": f" REQ-{i} ", "attempt_id": f"a{i}"} for i in range(1, n, 4)][:BATCH]
    t0 = time.perf_counter()
    for a in args:
        registry.resolve(contract, a, world)
    resolve_s = (time.perf_counter() - t0) / len(args)
    del registry, items
    gc.collect()
    return {
        "fixtures": n,
        "build_s": build_s,
        "hit_median_s": median(hits),
        "hit_batches_s": [min(hits), max(hits)],
        "miss_median_s": median(misses),
        "resolve_per_call_s": resolve_s,
    }


def vcr_at(entries: int, probes_n: int, variant: str) -> dict[str, Any]:
    """VCR's replay path over `entries` recorded requests.

    `body`: POST with the request as a JSON body, matched on VCR's default matchers plus `body` (a tool
    request's identity is its body). `query`: GET with the request in the query string, VCR's default
    matchers only (method, scheme, host, port, path, query), the cheapest exact setup VCR offers.
    """
    from urllib.parse import urlencode

    import vcr
    from vcr.cassette import Cassette
    from vcr.matchers import body, host, method, path, port, query, scheme
    from vcr.request import Request

    def vcr_request(tool: str, i: int) -> Request:
        request = request_for(tool, i)
        if variant == "query":
            qs = urlencode(sorted((k, json.dumps(v)) for k, v in request.items()))
            return Request("GET", f"https://tools.invalid/{tool}/v1?{qs}", None, {})
        payload = json.dumps(request, sort_keys=True).encode("utf-8")
        return Request("POST", f"https://tools.invalid/{tool}/v1", payload, {"Content-Type": "application/json"})

    matchers: tuple[Any, ...] = (method, scheme, host, port, path, query)
    if variant == "body":
        matchers += (body,)
    tools = list(TOOLS)
    cassette = Cassette("bench-fixture-lookup-never-saved.yaml", match_on=matchers, allow_playback_repeats=True)
    for i in range(entries):
        response = {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["application/json"]},
            "body": {"string": json.dumps({"n": i}).encode("utf-8")},
        }
        cassette.append(vcr_request(tools[i % len(tools)], i), response)
    rng = random.Random(SEED)
    picks = [rng.randrange(entries) for _ in range(probes_n)]
    fresh = [vcr_request(tools[i % len(tools)], i) for i in picks]
    for i, req in zip(picks[:20], fresh[:20], strict=True):
        got = cassette.play_response(req)
        assert json.loads(got["body"]["string"]) == {"n": i}, "VCR played the wrong entry"
    times = []
    for req in fresh:
        gc.disable()
        t0 = time.perf_counter()
        cassette.play_response(req)
        times.append(time.perf_counter() - t0)
        gc.enable()
    return {
        "variant": variant,
        "matchers": [m.__name__ for m in matchers],
        "entries": entries,
        "median_s": median(times),
        "range_s": [min(times), max(times)],
        "probes": probes_n,
        "vcrpy": getattr(vcr, "__version__", "unknown"),
    }


def run(config: Config) -> dict[str, Any]:
    n = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    big = n17q_at(n, repeat)
    small = n17q_at(VCR_ENTRIES, repeat)
    variants = {v: vcr_at(VCR_ENTRIES, repeat, v) for v in ("query", "body")}
    # The budget is judged against the faster VCR setup: the comparison must not flatter N17Q.
    vcr_result = min(variants.values(), key=lambda r: r["median_s"])
    ratio = vcr_result["median_s"] / big["hit_median_s"]
    same_size = vcr_result["median_s"] / small["hit_median_s"]
    scale = big["hit_median_s"] / small["hit_median_s"]
    us = 1e6
    rows = [
        row(
            f"fixture lookup, {n:,} fixtures (hit)",
            f"median < {LOOKUP_BUDGET_S * us:g} µs",
            f"{big['hit_median_s'] * us:.2f} µs median per call (batches of {BATCH:,}, {repeat} batches; "
            f"range {big['hit_batches_s'][0] * us:.2f}-{big['hit_batches_s'][1] * us:.2f} µs); "
            f"miss {big['miss_median_s'] * us:.2f} µs",
            big["hit_median_s"] < LOOKUP_BUDGET_S,
            config,
        ),
        row(
            f"fixture lookup vs VCR.py {vcr_result['vcrpy']} matcher at {VCR_ENTRIES:,} entries",
            f">= {VCR_RATIO_BUDGET:g}x faster",
            f"{ratio:,.0f}x (VCR play_response, {vcr_result['variant']} matching, "
            f"{vcr_result['median_s'] * 1e3:.3f} ms median over {vcr_result['probes']} calls, vs N17Q "
            f"{big['hit_median_s'] * us:.2f} µs at {n:,} fixtures)",
            ratio >= VCR_RATIO_BUDGET,
            config,
        ),
    ]
    details = {
        "repeat": repeat,
        "batch": BATCH,
        "n17q": {str(n): big, str(VCR_ENTRIES): small},
        "vcr": variants,
        "vcr_judged": vcr_result["variant"],
        "ratio_vs_vcr": ratio,
        "ratio_vs_vcr_same_size": same_size,
        "scale_ratio_big_over_small": scale,
    }
    notes = [
        f"O(1): median at {n:,} / at {VCR_ENTRIES:,} fixtures = {scale:.2f} "
        f"({big['hit_median_s'] * us:.2f} vs {small['hit_median_s'] * us:.2f} µs); same-size ratio vs VCR "
        f"{same_size:,.0f}x; the growth is the memory hierarchy (1,000 fixtures stay in cache, 100,000 do not), "
        "not a scan: one dict probe and the key's candidates, whatever the registry's size",
        "VCR play_response median at 1,000 entries: "
        + "; ".join(
            f"{v} matching ({', '.join(r['matchers'])}) {r['median_s'] * 1e3:.3f} ms" for v, r in variants.items()
        ),
        f"registry build (load + contract check of every fixture): {big['build_s']:.2f} s at {n:,}; "
        f"resolve (normalize + digest + lookup) {big['resolve_per_call_s'] * us:.2f} µs per call",
    ]
    return {"rows": rows, "details": details, "notes": notes}
