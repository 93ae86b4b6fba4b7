"""Model connections for the relay tests (issue 33): proposed by one reviewer, approved by another, through the same
services a person in the admin goes through (`fixtures_review.connections`)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from fixtures_review.connections import connection_approve, connection_propose
from fixtures_review.models import Connection


def reviewers() -> tuple[Any, Any]:
    """Two people with the reviewer role: the proposer and the approver (made once per test database)."""
    people = []
    for username in ("model-proposer", "model-approver"):
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.groups.add(Group.objects.get(name="reviewer"))
        people.append(user)
    return people[0], people[1]


def propose_model_connection(name: str, *, port: int, credential: str, host: str = "127.0.0.1", **more: Any):
    proposer, _ = reviewers()
    return connection_propose(
        name=name,
        user=proposer,
        kind=Connection.Kind.MODEL,
        endpoint_scheme="http",
        endpoint_host=host,
        endpoint_port=port,
        endpoint_path_prefix="/v1",
        credential_name=credential,
        **more,
    )


def approve_model_connection(name: str, *, port: int, credential: str, host: str = "127.0.0.1") -> Connection:
    connection = propose_model_connection(name, port=port, credential=credential, host=host)
    return connection_approve(connection=connection, user=reviewers()[1])
