"""Credentials by name: which header, field, query or fragment parameter, form or multipart field holds a credential
because of what it is called, whatever its value looks like. One set of rules for every door: capture intake redacts
by them (fixtures_review/intake.py), and the scan every door runs (`scanning`) finds a secret-named parameter in a URL
anywhere in a text with them (an OTLP span's `url.full`, a redirect's `Location` in a trace).

Pure functions, no Django (an import-linter contract keeps this package so).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

# Headers that carry credentials, a rule set of its own (compared lower-case, `_` read as `-`): the names the
# field uses for credentials (HTTP auth, cookies, API gateways, cloud and SaaS APIs, CSRF and session ids), any
# name ending in a credential word (`-key`, `-token`, `-secret`, `-session`, `-session-id`, `-password`,
# `-signature`, `-auth`), and any name holding `api-key`, `apikey`, `authorization`, `cookie` or `credential`.
# Known non-secrets are kept: CORS headers (their values name headers or say whether credentials are allowed,
# which changes what a fixture means), a WebSocket handshake nonce, an idempotency key the client chose.
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "authentication",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "apikey",
        "x-auth-token",
        "x-auth-key",
        "x-auth-email-key",
        "x-access-token",
        "x-amz-security-token",
        "x-goog-api-key",
        "x-goog-iam-authorization-token",
        "ocp-apim-subscription-key",
        "x-functions-key",
        "x-csrf-token",
        "x-xsrf-token",
        "csrf-token",
        "private-token",
        "job-token",
        "x-gitlab-token",
        "x-hub-signature",
        "x-hub-signature-256",
        "dd-api-key",
        "dd-application-key",
        "x-shopify-access-token",
        "x-vault-token",
        "x-consul-token",
        "x-nomad-token",
        "x-honeycomb-team",
        "circle-token",
        "x-figma-token",
        "x-session-id",
        "session-id",
        "x-session-token",
        "sessionid",
        "x-upload-token",
        "x-algolia-api-key",
        "x-rapidapi-key",
        "x-postmark-server-token",
        "x-twilio-signature",
        "x-slack-signature",
        "stripe-signature",
    }
)
_SECRET_HEADER_SUFFIXES = (
    "-key",
    "-token",
    "-secret",
    "-session",
    "-session-id",
    "-sessionid",
    "-password",
    "-signature",
    "-auth",
)
_SECRET_HEADER_PARTS = ("api-key", "apikey", "authorization", "cookie", "credential", "secret", "password")
_NOT_SECRET_HEADER_PREFIXES = ("access-control-", "accept", "content-", "sec-websocket-")
_NOT_SECRET_HEADERS = frozenset({"idempotency-key", "x-idempotency-key", "public-key-pins", "www-authenticate"})
# Query parameters of signed URLs: AWS SigV4 (`X-Amz-*`), GCS V4 and V2 (`X-Goog-*`, `GoogleAccessId`,
# `Signature`), Azure SAS (`sig`), CloudFront (`Signature`, `Key-Pair-Id`, `Policy`). Compared lower-case;
# a prefix ends with `-`.
SIGNED_URL_PARAM_PREFIXES = ("x-amz-", "x-goog-")
SIGNED_URL_PARAMS = frozenset({"googleaccessid", "signature", "sig", "key-pair-id", "policy"})

# A field is secret-named when its name, lower-cased with every non-alphanumeric removed, contains one of
# these, or ends with `token` (access_token, refresh_token, id_token, x-auth-token), or is one of the short
# names. `token_type`, `max_tokens`, `tokens_used` are not: they say what a token is or count them.
SECRET_NAME_PARTS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "apikey",
    "privatekey",
    "accesskey",
    "credential",
    "connectionstring",
    "connstr",
    "authorization",
    "cookie",
    "sessionid",
    "signature",
    "clientassertion",
    "codeverifier",
    "devicecode",
    "backupcode",  # second-factor backup and recovery codes",
    "recoverycode",
    "seedphrase",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "licensekey",
    "sessiontoken",
    "sessionkey",
)
_SECRET_NAME_EXACT = frozenset(
    {"pwd", "pass", "sig", "dsn", "auth", "key", "jwt", "otp", "pin", "assertion", "samlresponse", "samlrequest"}
)
_NOT_SECRET_NAMES = frozenset({"tokentype", "secretname", "passwordpolicy", "keyid", "signaturealgorithm"})
_NON_ALNUM = re.compile(r"[^a-z0-9]")


@functools.lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    norm = _NON_ALNUM.sub("", name.lower())
    if not norm or norm in _NOT_SECRET_NAMES:
        return False
    if norm in _SECRET_NAME_EXACT or norm.endswith("token"):
        return True
    return any(part in norm for part in SECRET_NAME_PARTS)


@functools.lru_cache(maxsize=4096)
def is_secret_header(name: str) -> bool:
    low = name.strip().lower().replace("_", "-")
    if low in SECRET_HEADERS:
        return True
    if low in _NOT_SECRET_HEADERS or low.startswith(_NOT_SECRET_HEADER_PREFIXES):
        return False
    return (
        low.endswith(_SECRET_HEADER_SUFFIXES)
        or any(part in low for part in _SECRET_HEADER_PARTS)
        or (is_secret_name(name))
    )


def is_signed_url_param(name: str) -> bool:
    low = name.lower()
    return low in SIGNED_URL_PARAMS or low.startswith(SIGNED_URL_PARAM_PREFIXES)


# Names that hold a credential when they hold a value (a string, a number), and only then: a session id, a CSRF
# token. Under `session` a JSON object describes the session (its `id`, `user`, `expires_at`) and its own keys speak
# for themselves (`session.token`), so it is not blanked whole.
_SECRET_VALUE_NAMES = frozenset(
    {"session", "sid", "sessid", "phpsessid", "connectsid", "sessionkey", "csrf", "xsrf", "csrfkey"}
)


@functools.lru_cache(maxsize=4096)
def is_secret_value_name(name: str) -> bool:
    """Whether a value (not an object or a list) under `name` is a credential: every secret name, and the session and
    CSRF names of `_SECRET_VALUE_NAMES`."""
    return is_secret_name(name) or _NON_ALNUM.sub("", name.lower()) in _SECRET_VALUE_NAMES


# OAuth's authorization `code` (RFC 6749 4.1.2) is a credential, but `code` is usually nothing of the kind: an error
# code, a country, source code in a tool's arguments. It is read as OAuth's when its neighbours say an OAuth exchange
# is going on: the authorization response (`state`, OIDC's `session_state`, RFC 9207's `iss`) or the token request
# (`grant_type`, `redirect_uri`, `code_verifier`, `client_id`), or when it sits in a URL's fragment (the hybrid
# flow's `#code=…&id_token=…`). `state` itself is not redacted: a nonce bound to the browser's session, worth
# nothing without that session, which a fixture needs to show that the callback answers the request it made.
_OAUTH_CONTEXT = frozenset(
    {"state", "sessionstate", "iss", "granttype", "redirecturi", "codeverifier", "clientid", "idtoken", "accesstoken"}
)
# In a JSON object `state` and `iss` are usually a record's own (`{"code": "PROJ-1", "state": "open"}`): beside them
# `code` is OAuth's only when it looks like an authorization code, a long opaque string.
_OAUTH_CONTEXT_IN_JSON = _OAUTH_CONTEXT - {"state", "iss"}
_AUTHORIZATION_CODE = re.compile(r"[A-Za-z0-9._~+/=-]{16,}")


def is_oauth_code(
    name: str, neighbours: Iterable[str], *, value: object = None, in_json: bool = False, in_fragment: bool = False
) -> bool:
    """Whether `name` is OAuth's authorization code among these neighbouring names (of one query, fragment, form or
    JSON object; in JSON its `value` is needed)."""
    if _NON_ALNUM.sub("", name.lower()) != "code":
        return False
    if in_fragment:
        return True
    names = {_NON_ALNUM.sub("", n.lower()) for n in neighbours}
    if not in_json:
        return bool(names & _OAUTH_CONTEXT)
    if names & _OAUTH_CONTEXT_IN_JSON:
        return True
    return bool(names & _OAUTH_CONTEXT) and isinstance(value, str) and bool(_AUTHORIZATION_CODE.fullmatch(value))


# A name that measures a secret rather than holds one: `password_min_length`, `token_ttl`, `secret_version`.
MEASURE_SUFFIXES = (
    "length",
    "len",
    "count",
    "size",
    "ttl",
    "max",
    "min",
    "seconds",
    "secs",
    "ms",
    "age",
    "version",
    "attempts",
    "expiry",
    "expires",
    "expiresin",
    "expiresat",
    "lifetime",
    "timeout",
    "at",
    "rounds",
    "bits",
    "iterations",
)
