"""A deterministic generator of a large, realistic run bundle (`n17q.run-bundle/1`), streamed to disk.

The shape is a long recorded live run of a coding agent, built from repeating units in the proportions a
real run has, so 10,000, 50,000 and 100,000 events are the same run at three lengths:

- three attempts (the first interrupted at 40 % of the run, the second at 75 %), each with a workspace of
  its own derived from the previous one (``reconstruct``); the old workspace is superseded;
- "steps": ``model.proposal`` → ``tool.call`` → ``tool.result``, the results pointing at a handful of shared
  blobs (so the blob store holds 8 blobs however long the run), with a ``budget.charged`` every second
  step, an occasional ``not_found`` result (blob null, an ``absent`` path), an occasional message proposal
  with no call, and now and then a ``human.input``;
- every tenth step is an edit, followed by ``workspace.changed`` (a new tree digest);
- every fortieth step a validation gate: the test command's ``tool.call`` and ``command.receipt``,
  ``evidence.observed``, ``artifact.created``, ``evidence.admitted``, ``effect.intent``,
  ``approval.recorded`` binding the intent's evidence set, ``policy.decision`` (allow),
  ``effect.execution`` (acknowledged), an ``account.claim`` and a ``checkpoint``. One gate in five first
  fails (exit 1), is fixed by an edit and rerun; one in twenty-five also has a failing lint receipt that a
  reviewer waives;
- the run ends with a completion claim, ``run.state`` completed and ``attempt.ended``.

The run is clean: its lineage findings are zero, so the checker walks every rule's happy path (the
expensive one: nothing short-circuits) and a finding in the results means a checker change, not noise.
Nothing is held in memory but the current unit: events go to ``events.jsonl`` one line at a time.
Same ``n`` gives byte-identical files (the SHA-256 of ``events.jsonl`` is reported to show it).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import random
import shutil
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from n17q_engine import bundle
from n17q_engine.canonical import digest_bytes, digest_json, evidence_set_digest

SEED = 17
RUN_START = datetime(2026, 7, 1, 9, 0, 0, tzinfo=UTC)
POLICY = "bench-policy@3"
PURPOSE = "validation:focused"
TAIL_EVENTS = 3  # completion claim, run.state, attempt.ended

TOOLS = (
    ("fs.read", {"path": "src/billing/invoice.py"}),
    ("code.search", {"query": "def apply_discount", "limit": 20}),
    ("fs.list", {"path": "src/billing", "depth": 2}),
    ("docs.search", {"query": "rounding rules for tax lines", "corpus": "internal-docs", "limit": 5}),
    ("fs.read", {"path": "tests/billing/test_invoice.py"}),
    ("code.search", {"query": "TaxLine(", "limit": 50}),
)


def _blob(text: str, media_type: str, role: str) -> tuple[bytes, dict[str, Any]]:
    data = text.encode("utf-8")
    return data, {"media_type": media_type, "size": len(data), "role": role, "retention": "standard"}


def _make_blobs() -> tuple[list[str], list[str], dict[str, bytes], dict[str, dict[str, Any]]]:
    rng = random.Random(SEED)
    datas: dict[str, bytes] = {}
    meta: dict[str, dict[str, Any]] = {}
    results: list[str] = []
    for i in range(6):
        lines = [
            {
                "path": f"src/billing/mod_{i}_{j}.py",
                "line": rng.randrange(1, 900),
                "text": "    total = round(sum(line.amount for line in lines), 2)  # é",
            }
            for j in range(4 + 8 * i)
        ]
        data, m = _blob(json.dumps({"matches": lines}, ensure_ascii=False), "application/json", "tool-output")
        d = digest_bytes(data)
        datas[d], meta[d] = data, m
        results.append(d)
    logs: list[str] = []
    for outcome in ("passed", "failed"):
        body = "".join(f"tests/billing/test_invoice.py::test_case_{k} PASSED\n" for k in range(60))
        if outcome == "failed":
            body += "tests/billing/test_invoice.py::test_rounding FAILED\nE  assert 10.01 == 10.0\n"
        data, m = _blob(body + f"==== {outcome} ====\n", "text/plain", "command-output")
        d = digest_bytes(data)
        datas[d], meta[d] = data, m
        logs.append(d)
    return results, logs, datas, meta


class _Writer:
    def __init__(self, out: BinaryIO, rng: random.Random) -> None:
        self.out, self.rng, self.seq = out, rng, 0

    def new_id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def emit(self, kind: str, attempt: str | None, fields: dict[str, Any], *, id: str | None = None) -> str:
        self.seq += 1
        event_id = id or self.new_id()
        logical = RUN_START + timedelta(seconds=self.seq)
        wall = logical + timedelta(milliseconds=self.seq % 1000)
        event = {
            "seq": self.seq,
            "id": event_id,
            "kind": kind,
            "at": {
                "logical": logical.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "wall": wall.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            },
            "attempt": attempt,
            **fields,
        }
        self.out.write(json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n")
        return event_id


class _Run:
    """The generator's state: which attempt and workspace are current, and the workspace's tree."""

    def __init__(self, w: _Writer, n: int, run_id: str) -> None:
        self.w, self.n, self.run_id = w, n, run_id
        self.results, self.logs, self.blob_data, self.blob_meta = _make_blobs()
        self.attempt_no = 0
        self.attempt: str | None = None
        self.workspace: str | None = None
        self.tree_rev = 0
        self.tree = ""
        self.steps = 0
        self.gates = 0
        self.last_ids: list[str] = []
        self.last_receipt: str | None = None
        self.last_observation: str | None = None
        self.world_revision = 0

    # -------------------------------------------------------------- helpers

    def _tree(self) -> str:
        return digest_bytes(f"tree:{self.workspace}:{self.tree_rev}".encode())

    def start_attempt(self) -> None:
        w = self.w
        previous_attempt, previous_ws = self.attempt, self.workspace
        if previous_attempt is not None:
            w.emit("attempt.ended", previous_attempt, {"outcome": "interrupted"})
            w.emit(
                "workspace.lifecycle",
                previous_attempt,
                {"workspace_id": previous_ws, "state": "superseded", "cause": None},
            )
        self.attempt_no += 1
        self.attempt = f"att-{self.attempt_no}"
        w.emit(
            "attempt.started",
            self.attempt,
            {
                "number": self.attempt_no,
                "reason": "task" if previous_attempt is None else "retry after harness interruption",
                "parent_attempt_id": previous_attempt,
            },
        )
        self.workspace = f"ws-{self.attempt_no}"
        self.tree_rev = 0
        # A reconstruction with equal content starts from the tree its source had.
        self.tree = self.tree if previous_ws is not None else self._tree()
        derived = (
            None
            if previous_ws is None
            else {"workspace_id": previous_ws, "relation": "reconstruct", "content_equal": True}
        )
        w.emit(
            "workspace.created",
            self.attempt,
            {
                "workspace_id": self.workspace,
                "base_digest": digest_bytes(b"base:billing-service@4f2a9c1"),
                "overlay_digest": digest_bytes(b"overlay:none"),
                "environment_revision": "py3.11-debian12@7",
                "derived_from": derived,
                "overlay_files": ["config/local.toml"],
            },
        )

    def step(self, *, tool_index: int | None = None) -> None:
        """model.proposal → tool.call → tool.result (and a budget charge every second step)."""
        w, i = self.w, self.steps
        self.steps += 1
        if i % 50 == 23:
            # A message to the user: no call follows.
            self.last_ids = [
                w.emit(
                    "model.proposal",
                    self.attempt,
                    {
                        "context_digest": digest_bytes(f"ctx:{i}".encode()),
                        "proposal": {"type": "message", "text": f"Progress: {self.gates} gates passed so far."},
                        "accepted": True,
                    },
                )
            ]
            return
        tool, args = TOOLS[(tool_index if tool_index is not None else i) % len(TOOLS)]
        request = {**args, "step": i}
        proposal = w.emit(
            "model.proposal",
            self.attempt,
            {
                "context_digest": digest_bytes(f"ctx:{i}".encode()),
                "proposal": {"type": "tool_call", "tool": tool, "arguments": request},
                "accepted": True,
            },
        )
        call = w.emit(
            "tool.call",
            self.attempt,
            {
                "tool": tool,
                "contract_revision": 3,
                "request": request,
                "request_digest": digest_json(request),
                "proposal_id": proposal,
                "workspace_id": self.workspace,
            },
        )
        missing = i % 37 == 36
        result = w.emit(
            "tool.result",
            self.attempt,
            {
                "call_id": call,
                "origin": "historical",
                "outcome": "not_found" if missing else "ok",
                "blob": None if missing else self.results[i % len(self.results)],
                "absent": {"$.matches": "absent"} if missing else {},
            },
        )
        self.last_ids = [proposal, call, result]
        if i % 2 == 1:
            w.emit("budget.charged", self.attempt, {"resource": "tokens", "amount": 1800 + i % 700})
        if i % 200 == 101:
            w.emit(
                "human.input",
                self.attempt,
                {
                    "actor_role": "operator",
                    "visible_ids": list(self.last_ids),
                    "action": "comment",
                    "note": "looks on track",
                },
            )

    def edit(self) -> str:
        """An edit: a write call and its result, then the workspace's new tree."""
        w, i = self.w, self.steps
        self.steps += 1
        request = {"path": f"src/billing/mod_{i % 17}.py", "patch_digest": digest_bytes(f"patch:{i}".encode())}
        proposal = w.emit(
            "model.proposal",
            self.attempt,
            {
                "context_digest": digest_bytes(f"ctx:{i}".encode()),
                "proposal": {"type": "tool_call", "tool": "fs.write", "arguments": request},
                "accepted": True,
            },
        )
        call = w.emit(
            "tool.call",
            self.attempt,
            {
                "tool": "fs.write",
                "contract_revision": 2,
                "request": request,
                "request_digest": digest_json(request),
                "proposal_id": proposal,
                "workspace_id": self.workspace,
            },
        )
        w.emit(
            "tool.result",
            self.attempt,
            {"call_id": call, "origin": "historical", "outcome": "ok", "blob": None, "absent": {}},
        )
        self.tree_rev += 1
        self.tree = self._tree()
        return w.emit(
            "workspace.changed",
            self.attempt,
            {
                "workspace_id": self.workspace,
                "overlay_revision": self.tree_rev,
                "tree_digest": self.tree,
                "cause": call,
            },
        )

    def receipt(self, suites: list[str], *, failed: bool, observe: bool) -> str:
        w = self.w
        command = "pytest -q tests/billing" if suites != ["lint"] else "ruff check src"
        request = {"command": command, "cwd": "/workspace"}
        call = w.emit(
            "tool.call",
            self.attempt,
            {
                "tool": "shell.run",
                "contract_revision": 5,
                "request": request,
                "request_digest": digest_json(request),
                "proposal_id": None,
                "workspace_id": self.workspace,
            },
        )
        results: dict[str, Any] = {"passed": 61 if not failed else 60, "failed": 1 if failed else 0, "skipped": 2}
        if failed:
            results["failing_suites"] = list(suites)
        receipt = w.emit(
            "command.receipt",
            self.attempt,
            {
                "call_id": call,
                "workspace_id": self.workspace,
                "command": command,
                "suites": suites,
                "pre_tree": self.tree,
                "post_tree": self.tree,
                "environment_revision": "py3.11-debian12@7",
                "completion": "completed",
                "exit_code": 1 if failed else 0,
                "results": results,
                "output_blob": self.logs[1 if failed else 0],
            },
        )
        if observe:
            self.last_observation = w.emit(
                "evidence.observed",
                self.attempt,
                {
                    "source": receipt,
                    "workspace_id": self.workspace,
                    "tree_digest": self.tree,
                    "scope": PURPOSE,
                },
            )
        return receipt

    def gate(self) -> None:
        w, k = self.w, self.gates
        self.gates += 1
        if k % 25 == 24:
            lint = self.receipt(["lint"], failed=True, observe=False)
            w.emit(
                "waiver.granted",
                self.attempt,
                {
                    "failure": lint,
                    "suite": "lint",
                    "actor_role": "reviewer",
                    "rationale": "pre-existing lint debt in vendored code, tracked separately",
                },
            )
        if k % 5 == 4:
            self.receipt(["unit"], failed=True, observe=True)
            self.edit()
        receipt = self.receipt(["unit"], failed=False, observe=True)
        observation = self.last_observation
        artifact = f"art-{k + 1}"
        w.emit(
            "artifact.created",
            self.attempt,
            {
                "artifact_id": artifact,
                "digest": digest_bytes(f"artifact:{k}".encode()),
                "media_type": "text/x-diff",
                "size": 2048 + k,
                "role": "patch",
                "workspace_id": self.workspace,
                "tree_digest": self.tree,
                "files": [f"src/billing/mod_{k % 17}.py"],
            },
        )
        admission = w.emit(
            "evidence.admitted",
            self.attempt,
            {
                "observation_id": observation,
                "purpose": PURPOSE,
                "artifact_id": artifact,
                "workspace_id": self.workspace,
                "tree_digest": self.tree,
                "policy_revision": POLICY,
                "decision": "admitted",
                "compatibility": None,
                "rationale": "focused suite passed on the artifact's tree",
            },
        )
        intent, approval = w.new_id(), w.new_id()
        w.emit(
            "effect.intent",
            self.attempt,
            {
                "effect_class": "deploy.preview",
                "destination": "preview-env",
                "artifact_id": artifact,
                "admission_ids": [admission],
                "approval_id": approval,
                "idempotency_key": f"deploy-{self.run_id}-{k}",
                "namespace": "live",
                "historical_intent": None,
            },
            id=intent,
        )
        w.emit(
            "approval.recorded",
            self.attempt,
            {
                "subject": intent,
                "evidence_set_digest": evidence_set_digest([admission]),
                "decision": "approved",
                "actor_role": "reviewer",
                "origin": "human",
                "run": self.run_id,
                "environment": "live",
            },
            id=approval,
        )
        w.emit(
            "policy.decision",
            self.attempt,
            {
                "policy_revision": POLICY,
                "subject": intent,
                "input_ids": [admission],
                "required": [PURPOSE],
                "outcome": "allow",
                "reasons": ["focused validation admitted on the artifact's tree", "approved"],
            },
        )
        w.emit(
            "effect.execution",
            self.attempt,
            {
                "intent_id": intent,
                "attempt_no": 1,
                "stage": "completed",
                "outcome": "acknowledged",
                "connection": "https://preview.billing.example.internal",
            },
        )
        w.emit(
            "account.claim",
            self.attempt,
            {
                "text": f"Artifact {artifact} passes the focused billing suite.",
                "claim_kind": "validation",
                "supports": [receipt, admission],
                "scope": [PURPOSE],
            },
        )
        self.world_revision += 1
        w.emit(
            "checkpoint",
            self.attempt,
            {
                "world_revision": self.world_revision,
                "workspaces": {self.workspace: self.tree},
                "clock": (RUN_START + timedelta(seconds=w.seq)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        )
        self.last_receipt = receipt

    def finish(self) -> None:
        w = self.w
        assert self.last_receipt is not None
        w.emit(
            "account.claim",
            self.attempt,
            {
                "text": "All deliverables validated and deployed to preview.",
                "claim_kind": "completion",
                "supports": [self.last_receipt],
            },
        )
        w.emit("run.state", self.attempt, {"state": "completed", "reason": "task finished"})
        w.emit("attempt.ended", self.attempt, {"outcome": "completed"})


# The most events one unit of the loop can write (a failing gate with a lint waiver, after a step).
_MAX_UNIT = 40


def _write_manifest(folder: Path, run_id: str, task: dict[str, str], blobs: dict[str, Any]) -> None:
    """The manifest every generated bundle shares: a recorded live run of the bench agent, starting at RUN_START."""
    manifest = {
        "format": "n17q.run-bundle/1",
        "run": {
            "id": run_id,
            "task": task,
            "environment": "live",
            "mode": "recorded",
            "scenario": None,
            "model": {"name": "bench-agent", "version": "2026-06"},
            "policy_revision": POLICY,
            "created_at": RUN_START.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "parent_run": None,
        },
        "blobs": blobs,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def write_bundle(folder: Path, n: int) -> dict[str, Any]:
    """Write a bundle of exactly `n` events into the empty `folder`; return what was written."""
    if n < 1000:
        raise ValueError("the generated run needs at least 1,000 events")
    run_id = f"bench-run-{n}"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    with open(folder / "events.jsonl", "wb", buffering=1 << 20) as out:
        w = _Writer(out, rng)
        run = _Run(w, n, run_id)
        run.start_attempt()
        w.emit("run.state", run.attempt, {"state": "running", "reason": None})
        switches = [int(n * 0.40), int(n * 0.75)]
        while w.seq + _MAX_UNIT + TAIL_EVENTS <= n:
            if switches and w.seq >= switches[0]:
                switches.pop(0)
                run.start_attempt()
                continue
            s = run.steps
            if s % 40 == 39:
                run.steps += 1
                run.gate()
            elif s % 10 == 9:
                run.edit()
            else:
                run.step()
        # Fill to exactly n: the last turns' budget charges.
        while w.seq < n - TAIL_EVENTS:
            w.emit("budget.charged", run.attempt, {"resource": "turns", "amount": 1})
        run.finish()
    assert w.seq == n, (w.seq, n)
    blob_dir = folder / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    for digest, data in run.blob_data.items():
        (blob_dir / digest.removeprefix("sha256:")).write_bytes(data)
    _write_manifest(
        folder, run_id, {"id": "task-billing-rounding", "revision": "r12"}, dict(sorted(run.blob_meta.items()))
    )
    return {
        "path": str(folder),
        "events": n,
        "run_id": run_id,
        "gates": run.gates,
        "steps": run.steps,
        "attempts": run.attempt_no,
    }


def validate_bundle(folder: Path) -> dict[str, Any]:
    """Check the written bundle the way the importer will (manifest, blobs, every line), without Django."""
    manifest = bundle.parse_manifest((folder / "manifest.json").read_bytes())
    bundle.verify_blobs(folder, manifest)
    kinds: dict[str, int] = {}
    count = 0
    h = hashlib.sha256()
    with open(folder / "events.jsonl", "rb") as fh:
        for _line, event in bundle.iter_event_lines(fh):
            count += 1
            kinds[event["kind"]] = kinds.get(event["kind"], 0) + 1
            for name in ("blob", "output_blob"):
                ref = event.get(name)
                if ref is not None and ref not in manifest.blobs:
                    raise AssertionError(f"seq {event['seq']}: blob {ref} not in the manifest")
    with open(folder / "events.jsonl", "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return {
        "events": count,
        "kinds": dict(sorted(kinds.items())),
        "events_bytes": (folder / "events.jsonl").stat().st_size,
        "events_sha256": h.hexdigest(),
        "blobs": len(manifest.blobs),
    }


def read_events(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run and its validated events, parsed from the files (for in-process benchmarks)."""
    manifest = bundle.parse_manifest((folder / "manifest.json").read_bytes())
    with open(folder / "events.jsonl", "rb") as fh:
        return manifest.run, [event for _line, event in bundle.iter_event_lines(fh)]


# One temporary folder per benchmark session; a bundle of a given size is generated and validated once.
_session: Path | None = None
_cache: dict[int, tuple[Path, dict[str, Any]]] = {}


def session_dir() -> Path:
    global _session
    if _session is None:
        _session = Path(tempfile.mkdtemp(prefix="n17q-bench-"))
        atexit.register(shutil.rmtree, _session, ignore_errors=True)
    return _session


def bundle_of(n: int) -> tuple[Path, dict[str, Any]]:
    """The folder of the generated bundle of `n` events and its description (generated on first use)."""
    if n not in _cache:
        folder = session_dir() / f"bundle-{n}"
        info = write_bundle(folder, n)
        info.update(validate_bundle(folder))
        if info["events"] != n:
            raise AssertionError(f"generated {info['events']} events, wanted {n}")
        _cache[n] = (folder, info)
    return _cache[n]


# ---------------------------------------------------------------- a hostile shape: a dangling reference per event


def write_dangling_bundle(folder: Path, n: int) -> dict[str, Any]:
    """Write a bundle of `n` events each naming something the run does not hold (issue 20): every event is a
    ``tool.result`` whose ``call_id`` is a fresh id no event has, so the run has one LIN011 finding per event and one
    dangling edge per event. No blobs. Deterministic, streamed like `write_bundle`."""
    if n < 1:
        raise ValueError("the run needs at least one event")
    run_id = f"bench-dangling-{n}"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED + 1)
    with open(folder / "events.jsonl", "wb", buffering=1 << 20) as out:
        w = _Writer(out, rng)
        for _ in range(n):
            w.emit(
                "tool.result",
                None,
                {"call_id": w.new_id(), "origin": "historical", "outcome": "ok", "blob": None, "absent": {}},
            )
    _write_manifest(folder, run_id, {"id": "task-dangling", "revision": "r1"}, {})
    return {
        "path": str(folder),
        "events": n,
        "run_id": run_id,
        "events_bytes": (folder / "events.jsonl").stat().st_size,
    }


_dangling_cache: dict[int, tuple[Path, dict[str, Any]]] = {}


def dangling_bundle_of(n: int) -> tuple[Path, dict[str, Any]]:
    """The folder of the generated dangling-reference bundle of `n` events (generated on first use)."""
    if n not in _dangling_cache:
        folder = session_dir() / f"dangling-{n}"
        _dangling_cache[n] = (folder, write_dangling_bundle(folder, n))
    return _dangling_cache[n]
