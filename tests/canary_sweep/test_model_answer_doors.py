"""The model-answer doors (issue 36): a person types the answer a model should give to the request an agent's
replay stopped on, through `manage.py stage_model_answer`, `POST /api/v1/replays/<id>/missing/model-answer/` and the
missing-fixture page's form. The answer is user bytes staged as a recording: like any capture's, a canary in it is
masked before anything is stored. One stopped replay (it takes seconds) serves the three doors, a canary set each."""

from __future__ import annotations

import io
import json
import sys

import pytest
from django.core.management import call_command
from django.test import Client

from accounts.models import HarnessToken
from fixtures_review.models import StagedRecording
from n17q_engine.agent.model import MODEL_TOOL
from replays.models import Replay
from tests.engine.test_agent_decider import _isolation_or_skip, agent_folder
from tests.runs.test_api import token_for

from .canaries import Canaries

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]


def test_typed_model_answers(sweep, tmp_path, role_user):
    _isolation_or_skip()
    by_command = sweep.canaries
    by_api = sweep.also(Canaries.fresh("model answer API"))
    by_page = sweep.also(Canaries.fresh("model answer page"))
    call_command("load_demo", "--json", stdout=io.StringIO())
    folder = agent_folder(tmp_path, "mcp_openai_agent.py")
    call_command("register_agent", "answered", str(folder), "--command", "python mcp_openai_agent.py", "--json",
                 stdout=io.StringIO())  # fmt: skip
    out = io.StringIO()
    call_command("replay", "run-003-review-request", "--mode", "counterfactual", "--vary", "decider=agent:answered",
                 "--checkpoint", "e-003-a1-checkpoint", "--inline", "--json", stdout=out)  # fmt: skip
    replay = Replay.objects.get(pk=json.loads(out.getvalue())["replay"])
    assert [m["tool"] for m in replay.missing] == [MODEL_TOOL], replay.missing
    operator = role_user("operator", "answer-canary")

    # the command: the answer as text, and a whole completion read from a file
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"role": "assistant", "content": f"Use these:\n{by_command.environment_text()}"}))
    call_command("stage_model_answer", str(replay.pk), "--answer", str(answer), "--user", operator.username,
                 stdout=io.StringIO())  # fmt: skip
    answer.unlink()  # the user's own file, outside the data folder: not the product's to keep

    # the API: the canaries in a tool call's arguments and in the text
    key = token_for(operator, HarnessToken.Scope.CAPTURE, HarnessToken.Scope.IMPORT_RUNS)
    body = {
        "content": by_api.prose(),
        "tool_calls": [{"name": "shell.run", "arguments": {"argv": ["deploy"], "env": by_api.document()}}],
    }
    response = Client().post(
        f"/api/v1/replays/{replay.pk}/missing/model-answer/",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert response.status_code == 201, response.content[:500]

    # the page: a pasted chat completion
    page = Client()
    page.force_login(operator)
    completion = {"choices": [{"message": {"role": "assistant", "content": by_page.environment_text()}}]}
    response = page.post(f"/replays/{replay.pk}/missing/0/model-answer/", {"answer": json.dumps(completion)})
    assert response.status_code == 302 and "/review/" in response["Location"], response
    assert StagedRecording.objects.filter(tool=MODEL_TOOL).count() == 3
    sweep.check("model answer (command, API, page)")
