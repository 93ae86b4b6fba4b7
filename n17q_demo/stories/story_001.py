"""Seed story 001 (shared/seeds/001_…), the duplicate email on replay, as two runs: `run-001-recorded`, the
original live run (a reviewer narrows the audience, approves, one email goes out), and `run-001-naive-replay`, the
old way of replaying it (messages fed back, the historical approval reused, a second real email).
"""

from __future__ import annotations

from .bundle import StoryBundle
from .recorder import _Recorder, _run

STORY_001 = "001_c6aee59ec1eb4bb8"


_MESSAGE = """\
From: Acme Operations <ops@acme.example>
To: beta-customers@lists.acme.example
Subject: Scheduled maintenance on 14 June, 02:00-03:00 UTC

Hello,

The billing API will be read-only on 14 June between 02:00 and 03:00 UTC while we migrate its database.
Requests made in that window will be queued and applied afterwards. No action is needed on your side.

Acme Operations
"""


def _email_run(*, naive_replay: bool) -> StoryBundle:
    """The original live run, or (naive_replay) the old harness feeding its messages back in a sandbox.

    Both come from this one function because the naive replay *was* the original run played again: same
    proposals, same event ids, the recorded tool results fed back as `historical`. What differs is what the old
    harness changed without saying so: it skipped the reviewer's turn, copied the historical approval in as
    authority, and let the send reach the live provider.
    """
    original_id = "run-001-recorded"
    run_id = "run-001-naive-replay" if naive_replay else original_id
    policy = "mail-policy@3"
    purpose = "review:audience"
    broad_list = "all-customers@lists.acme.example"
    narrow_list = "beta-customers@lists.acme.example"
    if naive_replay:
        r = _Recorder(
            "001",
            task="task-maintenance-notice",
            logical="2026-06-10T14:00:00Z",
            wall="2026-09-02T08:41:00Z",
            wall_ratio=0.01,
            wall_overhead=0.03,
        )
    else:
        r = _Recorder(
            "001", task="task-maintenance-notice", logical="2026-06-10T14:00:00Z", wall="2026-06-10T14:00:00.400Z"
        )
    intent_id = r.eid("intent-send")

    r.attempt_started(
        "a1-start",
        "a1",
        number=1,
        reason="replay of run-001-recorded: recorded messages fed back"
        if naive_replay
        else "task: announce the billing API maintenance window",
    )
    p = r.proposal("propose-draft", {"type": "tool_call", "tool": "email.draft_create"}, visible=[], after=4)
    create = {
        "to": broad_list,
        "template": "maintenance-notice",
        "subject": "Scheduled maintenance on 14 June",
        "window": "2026-06-14T01:00Z/2026-06-14T02:00Z",
    }
    c = r.tool_call("call-draft-create", "email.draft_create", 3, create, proposal=p)
    r.tool_result(
        "res-draft-create",
        c,
        origin="historical",
        outcome="ok",
        # The first draft's overly broad audience is a recipient list: kept 7 days ("sensitive"), so the demo's
        # load has removed its bytes and the run page shows the expiry with its deletion record (docs/retention.md).
        blob=r.json_blob(
            {"draft_id": "dr-5501", "revision": 1, "to": broad_list}, role="tool-output", retention="sensitive"
        ),
    )
    if not naive_replay:
        r.world_transition(
            "draft-created",
            "mail:draft/dr-5501",
            before=None,
            after_revision=1,
            change={"op": "create", "to": broad_list},
            cause=c,
        )
    else:
        r.skip(0.1)

    p = r.proposal(
        "propose-draft-fix",
        {"type": "tool_call", "tool": "email.draft_update"},
        visible=[r.eid("res-draft-create")],
        after=6,
    )
    update = {"draft_id": "dr-5501", "base_revision": 1, "set": {"window": "2026-06-14T02:00Z/2026-06-14T03:00Z"}}
    c = r.tool_call("call-draft-update", "email.draft_update", 3, update, proposal=p)
    r.tool_result(
        "res-draft-update",
        c,
        origin="historical",
        outcome="ok",
        blob=r.json_blob({"draft_id": "dr-5501", "revision": 2, "to": broad_list}, role="tool-output"),
    )
    if not naive_replay:
        r.world_transition(
            "draft-updated",
            "mail:draft/dr-5501",
            before=1,
            after_revision=2,
            change={"op": "update", "set": ["window"]},
            cause=c,
        )
    else:
        r.skip(0.1)

    r.proposal(
        "propose-send",
        {"type": "tool_call", "tool": "email.send", "draft_id": "dr-5501"},
        visible=[r.eid("res-draft-update")],
        after=3,
    )
    hold = r.policy(
        "policy-needs-approval",
        policy_revision=policy,
        subject=intent_id,
        inputs=[],
        required=[purpose],
        outcome="needs_approval",
        reasons=["a send to a mailing list needs a reviewer's approval"],
    )
    if naive_replay:
        # The old harness replayed automated events only: the reviewer's turn was not played back.
        r.skip(95)
    else:
        r.human_input(
            "reviewer-narrows",
            actor_role="reviewer",
            visible=[r.eid("res-draft-update"), hold],
            action="reject_audience",
            note=f"{broad_list} is far too broad for a billing notice; send it to {narrow_list} only.",
            after=95,
        )
    narrow = {"draft_id": "dr-5501", "base_revision": 2, "set": {"to": narrow_list}}
    # The narrowing was the reviewer's instruction, not a model proposal; the call names none.
    c = r.tool_call("call-draft-narrow", "email.draft_update", 3, narrow, proposal=None, after=2)
    r.tool_result(
        "res-draft-narrow",
        c,
        origin="historical",
        outcome="ok",
        blob=r.json_blob({"draft_id": "dr-5501", "revision": 3, "to": narrow_list}, role="tool-output"),
    )
    if not naive_replay:
        r.world_transition(
            "draft-narrowed",
            "mail:draft/dr-5501",
            before=2,
            after_revision=3,
            change={"op": "update", "set": ["to"]},
            cause=c,
        )
    else:
        r.skip(0.1)
    c = r.tool_call("call-draft-get", "email.draft_get", 3, {"draft_id": "dr-5501"}, proposal=None)
    read = r.tool_result(
        "res-draft-get",
        c,
        origin="historical",
        outcome="ok",
        blob=r.json_blob(
            {"draft_id": "dr-5501", "revision": 3, "to": narrow_list, "recipients": 412}, role="tool-output"
        ),
    )
    r.artifact_created(
        "message-rendered",
        "art-message",
        data=_MESSAGE.encode("utf-8"),
        media_type="message/rfc822",
        role="email-message",
        workspace=None,
        tree_digest=None,
        files=[],
    )
    obs = r.observed("audience-observed", read, workspace=None, tree_digest=None, scope=[purpose])
    adm = r.admitted(
        "audience-admitted",
        obs,
        purpose=purpose,
        artifact="art-message",
        workspace=None,
        tree_digest=None,
        policy_revision=policy,
        rationale="draft revision 3 addresses the 412 recipients the reviewer chose",
    )
    if naive_replay:
        approval = r.approval(
            "approval",
            subject=intent_id,
            admission_ids=[adm],
            decision="approved",
            actor_role="reviewer",
            origin="historical",
            run=original_id,
            environment="live",
            after=30,
        )
    else:
        approval = r.approval(
            "approval",
            subject=intent_id,
            admission_ids=[adm],
            decision="approved",
            actor_role="reviewer",
            origin="human",
            run=run_id,
            environment="live",
            after=30,
        )
    r.policy(
        "policy-allow",
        policy_revision=policy,
        subject=intent_id,
        inputs=[adm],
        required=[purpose],
        outcome="allow",
        reasons=["review:audience admitted", f"approved by a reviewer ({approval})"],
    )
    intent = r.intent(
        "intent-send",
        effect_class="mutation",
        destination=f"mailbox:{narrow_list}",
        artifact="art-message",
        admission_ids=[adm],
        approval=approval,
        idempotency_key="send:dr-5501:r3",
        namespace="live",
    )
    assert intent == intent_id
    execution = r.execution("execution", intent, connection="smtp-provider", after=1.5)
    if naive_replay:
        r.world_transition(
            "mailbox-delivered",
            f"mailbox:{narrow_list}",
            before=42,
            after_revision=43,
            change={
                "op": "deliver",
                "message_id": "<m-7730@acme.example>",
                "recipients": 412,
                "delivered_at": "2026-09-02T08:41:03Z",
                "duplicate_of": "<m-5501@acme.example>",
            },
            cause=execution,
        )
        r.claim(
            "claim-sent",
            f"Sent the maintenance notice once to {narrow_list} (412 recipients).",
            kind="effect",
            supports=[execution],
        )
        r.run_state("run-completed", "completed", reason="replay finished")
    else:
        r.world_transition(
            "mailbox-delivered",
            f"mailbox:{narrow_list}",
            before=41,
            after_revision=42,
            change={"op": "deliver", "message_id": "<m-5501@acme.example>", "recipients": 412},
            cause=execution,
        )
        r.claim(
            "claim-sent",
            f"Sent the maintenance notice once to {narrow_list} (412 recipients).",
            kind="effect",
            supports=[execution],
        )
        r.run_state("run-completed", "completed", reason="notice sent")
    r.attempt_ended("a1-end", outcome="completed")

    if naive_replay:
        run = _run(
            run_id,
            task=("task-maintenance-notice", "r1"),
            environment="sandbox",
            mode="rerun",
            scenario=None,
            policy_revision=policy,
            created_at="2026-09-02T08:41:00Z",
            parent_run=original_id,
            isolation="degraded",
        )
        return r.bundle(
            story=STORY_001,
            title="Naive replay re-sent the notice through the live provider on the historical approval",
            run=run,
            # LIN005: the approval is the original run's, live environment, used as authority here.
            # LIN007: a sandbox run's intent in namespace live, executed on the live smtp-provider connection.
            expected={"LIN005", "LIN007"},
        )
    run = _run(
        run_id,
        task=("task-maintenance-notice", "r1"),
        environment="live",
        mode="recorded",
        scenario=None,
        policy_revision=policy,
        created_at="2026-06-10T14:00:00Z",
    )
    return r.bundle(
        story=STORY_001,
        title="Maintenance notice sent once to the narrowed beta list after the reviewer's approval",
        run=run,
        expected=set(),
    )
