"""An Inspect log whose original cannot be stored masked (an encrypted member), in the browser (issue 32): its run's
page says the original was not kept, why, and the keyed digest the run names instead."""

from __future__ import annotations

import pytest

from runs.models import MaskedSecret, Run
from runs.secret_scan import NOT_KEPT_RULE
from tests.runs.test_kept_originals import TOKEN, eval_log, import_run, with_member  # noqa: F401 - the fixture

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_run_page_says_its_original_was_not_kept(page, login, live_server, tmp_path, eval_log):  # noqa: F811
    log = with_member(eval_log, tmp_path / "log.eval", name="attachments/secret.bin", data=b"x" * 64, encrypted=True)
    run = Run.objects.get(run_id=import_run(log)["run"])
    not_kept = MaskedSecret.objects.get(run=run, rule=NOT_KEPT_RULE)
    login("reviewer")
    page.goto(f"{live_server.url}/runs/{run.run_id}/#masked-secrets")
    note = page.locator("#masked-secrets .not-kept")
    assert "The original file this run was made from was not kept" in note.inner_text()
    assert "encrypted" in note.inner_text() and not_kept.recorded_as in note.inner_text()
    assert TOKEN not in page.content()
    note.scroll_into_view_if_needed()
    shot(page, "run-original-not-kept")
    assert page.failed_requests == []
