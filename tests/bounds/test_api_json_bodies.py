"""Every API operation that takes a JSON body reads it through one bounded parser (console/api_parsers.py): a body
nested too deeply, or holding too many values, or not JSON at all, is a one-line 400 and never a 500.

DRF's own JSONParser let a deeply nested body's RecursionError out as a 500 on POST /api/v1/runs/<id>/captures/ and
POST /api/v1/replays/; the structural test keeps a new door from bringing it back.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver
from rest_framework.parsers import JSONParser

from console.api_parsers import MAX_JSON_VALUES, BoundedJSONParser
from n17q_site import api_urls

pytestmark = pytest.mark.django_db

DEEP = "[" * 50_000 + "]" * 50_000
WIDE = "[" + ",".join(["{}"] * (MAX_JSON_VALUES + 10)) + "]"


def _views(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _views(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            cls = getattr(p.callback, "view_class", None) or getattr(p.callback, "cls", None)
            if cls is not None:
                yield prefix + str(p.pattern), cls


def test_no_api_view_parses_json_with_drfs_unbounded_parser():
    from django.conf import settings

    rest: dict = settings.REST_FRAMEWORK
    assert rest["DEFAULT_PARSER_CLASSES"][0] == "console.api_parsers.BoundedJSONParser"
    checked = 0
    for route, cls in _views(api_urls.urlpatterns):
        for parser in getattr(cls, "parser_classes", []) or []:
            checked += 1
            unbounded = issubclass(parser, JSONParser) and not issubclass(parser, BoundedJSONParser)
            assert not unbounded, f"{route}: {cls.__name__} parses JSON with {parser.__name__}, not BoundedJSONParser"
    assert checked  # the walk saw the views' parsers


@pytest.fixture
def admin(django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.test", "x")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("body", "message"),
    [(DEEP, "nested too deeply"), (WIDE, f"more than {MAX_JSON_VALUES} values"), ("{not json", "JSON parse error")],
    ids=["deep", "wide", "malformed"],
)
@pytest.mark.parametrize(
    "url", ["/api/v1/runs/run-000-recorded/captures/", "/api/v1/replays/"], ids=["run-captures", "replays"]
)
def test_a_hostile_json_body_is_a_one_line_400(admin, url, body, message, capsys):
    from django.core.management import call_command

    call_command("load_demo", "--json")
    capsys.readouterr()
    response = admin.post(url, body, content_type="application/json")
    assert response.status_code == 400, response.content[:500]
    error = json.dumps(response.json())
    assert message in error and "\\n" not in error, error
