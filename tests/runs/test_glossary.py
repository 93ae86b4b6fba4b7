"""The glossary (issue 15, point 5): every lineage code and product term explained on one page, and a run's findings
link to their code's entry."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from n17q_engine.lineage import CODES, EXPLANATIONS
from runs.glossary import TERMS

pytestmark = pytest.mark.django_db


def test_every_lineage_code_has_an_explanation_and_an_entry(client, role_user):
    assert set(EXPLANATIONS) == set(CODES)
    client.force_login(role_user("viewer"))
    page = client.get("/glossary/").content.decode()
    for code, title in CODES.items():
        assert f'id="{code}"' in page and title in page, code
    for term, _meaning in TERMS:
        assert f'id="term-{term.replace(" ", "-")}"' in page, term


def test_a_finding_on_the_run_page_links_to_its_code(client, role_user, capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    client.force_login(role_user("viewer"))
    page = client.get("/runs/run-000-fail-open-replay/").content.decode()
    linked = set(re.findall(r'href="/glossary/#(LIN\d{3})"', page))
    assert "LIN014" in linked, sorted(linked)


def test_the_run_pages_product_words_link_to_their_entries(client, role_user, capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    client.force_login(role_user("viewer"))
    page = client.get("/runs/run-001-naive-replay/").content.decode()
    linked = set(re.findall(r'<a class="term" href="/glossary/#term-([a-z-]+)">', page))
    # The mode (a rerun), isolation, the objects and the approval chips name glossary terms.
    assert {"rerun", "isolation", "attempt", "intent", "approval"} <= linked, sorted(linked)
    entries = client.get("/glossary/").content.decode()
    assert all(f'id="term-{anchor}"' in entries for anchor in linked)
