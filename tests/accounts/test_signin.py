"""Sign-in throttling (issue 14, fourth attack): on 775880e every wrong password answered 200 and nothing stopped a
guesser. Limits per account and address, per address, per account; audited; and the account limit cannot lock
the real user out of a browser that has signed in before (accounts/signin.py)."""

from __future__ import annotations

import pytest

from accounts.models import AuditEntry
from accounts.signin import KNOWN_COOKIE

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-test-password"


@pytest.fixture
def limits(settings):
    settings.N17Q_SIGNIN_PAIR_LIMIT = 3
    settings.N17Q_SIGNIN_ADDRESS_LIMIT = 6
    settings.N17Q_SIGNIN_ACCOUNT_LIMIT = 8
    return settings


def sign_in(client, username: str, password: str, address: str):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_guessing_one_account_from_one_address_is_stopped_and_audited(client, role_user, limits):
    role_user("viewer", "ada")
    for _ in range(3):
        assert sign_in(client, "ada", "wrong", "198.51.100.7").status_code == 200
    refused = sign_in(client, "ada", PASSWORD, "198.51.100.7")  # even the right password is not checked now
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert b"Too many failed sign-ins" in refused.content and "_auth_user_id" not in client.session
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "target", "ip", "detail"))
    assert [a for a, *_ in actions] == ["auth.sign_in_refused"] * 3 + ["auth.sign_in_throttled"]
    assert all(t == "ada" and ip == "198.51.100.7" for _a, t, ip, _d in actions)
    assert actions[-1][3] == {"limit": "pair"}
    assert all(PASSWORD not in str(d) and "wrong" not in str(d) for *_, d in actions)
    # The same account from another address is not affected.
    assert sign_in(client, "ada", PASSWORD, "203.0.113.9").status_code == 302


def test_a_throttled_sign_in_checks_no_password_and_answers_the_same_for_a_right_or_wrong_one(
    client, role_user, limits
):
    # Issue 38's tour: a throttled sign-in also said "enter a correct password" — the page's form was bound to the
    # post, so drawing it checked the password, and the answer told a right guess (no such line) from a wrong one.
    from django.contrib.auth.signals import user_login_failed

    role_user("viewer", "ada")
    for _ in range(3):
        sign_in(client, "ada", "wrong", "198.51.100.7")
    checked: list[str] = []

    def failed(sender, credentials, **kwargs):
        checked.append(credentials.get("username", ""))

    user_login_failed.connect(failed)
    try:
        right = sign_in(client, "ada", PASSWORD, "198.51.100.7")
        wrong = sign_in(client, "ada", "still-wrong", "198.51.100.7")
    finally:
        user_login_failed.disconnect(failed)
    assert right.status_code == wrong.status_code == 429
    assert checked == []  # no password was checked, right or wrong
    for answer in (right, wrong):
        text = answer.content.decode()
        assert "Too many failed sign-ins" in text and "correct" not in text
        assert 'value="ada"' in text  # the name typed is kept, the password never echoed
        assert PASSWORD not in text and "still-wrong" not in text


def test_one_address_spraying_many_accounts_is_stopped(client, role_user, limits):
    role_user("viewer", "grace")
    for i in range(6):
        sign_in(client, f"user{i}", "wrong", "198.51.100.8")
    assert sign_in(client, "grace", PASSWORD, "198.51.100.8").status_code == 429
    assert sign_in(client, "grace", PASSWORD, "198.51.100.9").status_code == 302


def test_guessing_from_many_addresses_cannot_lock_the_real_user_out_of_a_known_browser(role_user, limits, client):
    from django.test import Client

    role_user("viewer", "linus")
    real = Client()
    assert sign_in(real, "linus", PASSWORD, "192.0.2.10").status_code == 302
    assert real.cookies[KNOWN_COOKIE].value
    real.post("/logout/")
    for i in range(8):  # eight addresses, one failure each: the account limit is reached
        sign_in(client, "linus", "wrong", f"198.51.100.{20 + i}")
    assert sign_in(client, "linus", PASSWORD, "198.51.100.99").status_code == 429  # a new browser: slowed
    assert sign_in(real, "linus", PASSWORD, "192.0.2.10").status_code == 302  # the real user's browser: not


def test_a_successful_sign_in_clears_that_addresses_count(client, role_user, limits):
    role_user("viewer", "joan")
    for _ in range(2):
        sign_in(client, "joan", "wrong", "198.51.100.30")
    assert sign_in(client, "joan", PASSWORD, "198.51.100.30").status_code == 302
    client.post("/logout/")
    for _ in range(2):
        assert sign_in(client, "joan", "wrong", "198.51.100.30").status_code == 200
    assert sign_in(client, "joan", PASSWORD, "198.51.100.30").status_code == 302
