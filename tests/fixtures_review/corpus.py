"""Labelled corpora for the secret scanner and the redaction rules, generated afresh on every run.

Every value that must be caught is built from `secrets` at import, so no test run sees the same secret twice
and nothing that looks like a credential is written in the repository.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import secrets
import string
import struct
import uuid
import zlib
from typing import Any

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
HEX = "0123456789abcdef"
UPPER_DIGITS = string.ascii_uppercase + string.digits
BASE32 = string.ascii_uppercase + "234567"
URLSAFE = ALNUM + "-_"


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def canary(n: int = 24) -> str:
    """A fresh, distinctive secret: nothing else in a test's data can contain it by chance."""
    return "cnry" + rnd(n)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jwt() -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": rnd(12), "iat": 1_700_000_000}).encode())
    return f"{header}.{payload}.{_b64url(secrets.token_bytes(32))}"


def pem() -> str:
    body = base64.b64encode(secrets.token_bytes(600)).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN RSA PRIVATE KEY-----\n{lines}\n-----END RSA PRIVATE KEY-----"


# rule -> [(text, secret it holds)]: true positives each rule must catch in its own right.
#
# Drawn from a seeded generator, not `secrets`: the generic field classes judge a body by how random it reads
# (field_classes.looks_random), which by design lets through about 1 random body in 70 of the `acme_<32>` shape
# (measured by tests/fixtures_review/test_field_classes.py over thousands of fresh samples, where a rate belongs).
# A fresh draw here made one CI run in about 60 fail on a sample the detector is documented to miss; with the seed
# every run judges the same samples, so a failure is a rule that changed. Canaries (`canary`) stay fresh.
POSITIVES_SEED = 36


def positives(seed: int = POSITIVES_SEED) -> dict[str, list[tuple[str, str]]]:
    draw = random.Random(seed)

    def rnd(n: int, alphabet: str = ALNUM) -> str:
        return "".join(draw.choice(alphabet) for _ in range(n))

    def one(text_of, secret):
        return (text_of(secret), secret)

    out: dict[str, list[tuple[str, str]]] = {
        "artifactory": [one(lambda s: f'artifactory_token: "{s}"', "AKC" + rnd(70))],
        "awskey": [
            one(lambda s: f"aws_access_key_id={s}", "AKIA" + rnd(16, BASE32)),  # key ids are base32
            one(lambda s: f'aws_secret_access_key = "{s}"', rnd(40, ALNUM + "/+")),
        ],
        "azure-storage-key": [
            one(lambda s: f"DefaultEndpointsProtocol=https;AccountKey={s}", rnd(86, ALNUM + "+/") + "==")
        ],
        "basic-auth": [one(lambda s: f"see https://admin:{s}@ci.internal/job", rnd(20))],
        "cloudant": [one(lambda s: f'cloudant_password = "{s}"', rnd(64, HEX))],
        "discord-bot-token": [one(lambda s: f"DISCORD={s}", "M" + rnd(23) + "." + rnd(6) + "." + rnd(27))],
        "git-hub-token": [one(lambda s: f"token {s} leaked", "ghp_" + rnd(36))],
        "git-lab-token": [one(lambda s: f"GITLAB_TOKEN={s}", "glpat-" + rnd(20))],
        "ibm-cloud-iam": [one(lambda s: f'ibm_cloud_iam_api_key = "{s}"', rnd(44, URLSAFE))],
        "ibm-cos-hmac": [one(lambda s: f'secret_access_key = "{s}"', rnd(48, HEX))],
        "jwt": [one(lambda s: f"id {s} end", jwt())],
        "keyword": [one(lambda s: f'db_password = "{s}"', rnd(16))],
        "mailchimp": [one(lambda s: f"mc key {s}", rnd(32, LOWER_ALNUM) + "-us12")],
        "npm": [one(lambda s: f"//registry.npmjs.org/:_authToken={s}", "npm_" + rnd(36))],
        "open-ai": [one(lambda s: f"OPENAI={s}", "sk-" + rnd(20) + "T3BlbkFJ" + rnd(20))],
        "private-key": [(pem(), "BEGIN RSA PRIVATE KEY")],
        "pypi-token": [one(lambda s: f"password = {s}", "pypi-AgEIcHlwaS5vcmc" + rnd(70, URLSAFE))],
        "send-grid": [one(lambda s: f"SENDGRID={s}", "SG." + rnd(22, URLSAFE) + "." + rnd(43, URLSAFE))],
        "slack": [
            one(
                lambda s: f"slack {s}",
                "xoxb-" + rnd(11, string.digits) + "-" + rnd(12, string.digits) + "-" + rnd(24, LOWER_ALNUM),
            )
        ],
        "softlayer": [one(lambda s: f'softlayer_api_key = "{s}"', rnd(64, LOWER_ALNUM))],
        "square-oauth": [one(lambda s: f"square {s}", "sq0csp-" + rnd(43, URLSAFE))],
        "stripe": [one(lambda s: f"stripe {s}", "sk_live_" + rnd(24))],
        "telegram-bot-token": [one(lambda s: f"bot {s}", rnd(9, string.digits) + ":" + rnd(35, URLSAFE))],
        "twilio-key": [one(lambda s: f"twilio {s}", "AC" + rnd(32, LOWER_ALNUM))],
        "pem-private-key": [(lambda k: (f"key:\n{k}\n", k))(pem())],
        "n17q-harness-token": [one(lambda s: f"N17Q_TOKEN={s}", "n17q_" + secrets.token_urlsafe(32))],
        "bearer-token": [one(lambda s: f"Authorization: Bearer {s}", rnd(40))],
        "url-userinfo": [one(lambda s: f"DATABASE_URL=postgres://app:{s}@db.internal:5432/app", rnd(18))],
        "signed-url-param": [
            one(lambda s: f"https://acct.blob.core.windows.net/c/f.pdf?sv=2022-11-02&sp=r&sig={s}", rnd(43) + "%3D"),
            one(
                lambda s: f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={s}",
                rnd(64, HEX),
            ),
        ],
        "google-api-key": [one(lambda s: f"maps?key={s}", "AIza" + rnd(35, URLSAFE))],
        "google-oauth-token": [one(lambda s: f"token {s}", "ya29." + rnd(60, URLSAFE))],
        "aws-secret-access-key": [
            one(lambda s: f'aws_secret_access_key = "{s}"', "/" + rnd(39, ALNUM + "/+")),
            one(lambda s: f"AWS_SECRET_KEY: '{s}'", "+" + rnd(39, ALNUM + "/+")),
        ],
        # The providers' real shapes: 93 characters and "AA"; the T3BlbkFJ marker; 34 letters.
        "anthropic-api-key": [one(lambda s: f"ANTHROPIC_API_KEY {s}", "sk-ant-api03-" + rnd(93, URLSAFE) + "AA")],
        "openai-api-key": [
            one(lambda s: f"key {s}", "sk-proj-" + rnd(74, URLSAFE) + "T3BlbkFJ" + rnd(73, URLSAFE) + rnd(1))
        ],
        "huggingface-token": [one(lambda s: f"HF {s}", "hf_" + rnd(34, string.ascii_letters))],
        "github-fine-grained-token": [one(lambda s: f"pat {s}", "github_pat_" + rnd(22) + "_" + rnd(59))],
        "connection-string-password": [one(lambda s: f"Server=db;Database=app;User Id=app;Password={s};", rnd(16))],
        # Opaque values (no provider prefix): found by the parameter's name alone, in a redirect or a callback.
        "url-credential-param": [
            one(lambda s: f"Location: https://app.example/cb#access_token={s}&token_type=bearer", rnd(40)),
            one(lambda s: f"https://app.example/oauth/callback?code={s}&state=af0ifjsldkj", rnd(32)),
            one(lambda s: f'<https://api.example/items?page=2&session_id={s}>; rel="next"', rnd(24)),
        ],
        # The field classes (n17q_secrets/field_classes.py): kinds of credential, whatever the vendor.
        "secret-named-value": [
            one(lambda s: f"token={s}", rnd(8, string.ascii_lowercase)),  # any entropy: letters only
            one(lambda s: f"SHIPPO_API_KEY={s}", rnd(12, string.ascii_lowercase)),
            one(lambda s: f"db:\n  password: {s}\n", rnd(10, string.ascii_lowercase)),
        ],
        "vendor-prefixed-token": [
            one(lambda s: f"LANGFUSE_SECRET {s}", "sk-lf-" + str(uuid.UUID(int=draw.getrandbits(128), version=4))),
            one(lambda s: f"smith {s}", "lsv2_pt_" + rnd(32, HEX) + "_" + rnd(10, HEX)),
            one(lambda s: f"pinecone {s}", "pcsk_" + rnd(5) + "_" + rnd(60)),
            one(lambda s: f"shipping {s}", "shippo_live_" + rnd(40, HEX)),
            one(lambda s: f"vendor {s}", "acme_" + rnd(32)),
        ],
        "connection-string-credential": [
            one(lambda s: f"jdbc:oracle:thin:scott/{s}@db:1521:orcl", rnd(14)),
            one(lambda s: f"REDIS_URL=redis://:{s}@cache:6379/0", rnd(14)),
        ],
        "webhook-url-token": [
            one(lambda s: f"https://discord.com/api/webhooks/{rnd(18, string.digits)}/{s}", rnd(68, URLSAFE)),
            one(lambda s: f"POST https://ci.example/api/webhooks/{s} done", rnd(32)),
        ],
        "aws-secret-key-near-id": [
            one(lambda s: f"AKIA{rnd(16, BASE32)},{s}", rnd(40, ALNUM + "/+")),
        ],
        # A field written as a name/value pair: Kubernetes env (JSON, YAML), HAR params, OTLP JSON attributes, tags.
        "secret-named-pair": [
            one(lambda s: f'{{"name": "DB_PASSWORD", "value": "{s}"}}', rnd(14)),
            one(lambda s: f"env:\n  - name: STRIPE_API_KEY\n    value: {s}\n", rnd(14, string.ascii_lowercase)),
            one(lambda s: f'{{"key":"http.request.header.cookie","value":{{"stringValue":"sess={s}"}}}}', rnd(20)),
            one(lambda s: f'{{"Key": "deploy_token", "Value": "{s}"}}', rnd(16)),
        ],
    }
    return out


# rule -> texts that look close but hold no secret: no rule may report anything in them.
NEAR_MISSES: dict[str, list[str]] = {
    "artifactory": ["AKC123", "the APPLE API is documented"],
    "awskey": ["AKIA-EXAMPLE", "AKIAshort", "aws docs say the secret key is rotated yearly"],
    "azure-storage-key": ["AccountKey=short;", "AccountKey is documented here"],
    "basic-auth": ["https://docs.example/path?q=1", "mailto:someone@example.com"],
    "cloudant": ['cloudant_password = "${CLOUDANT_PASSWORD}"', "cloudant docs"],
    "discord-bot-token": ["Mshort.abc.def"],
    "git-hub-token": ["ghp_short", "the ghp_ prefix marks a classic token"],
    "git-lab-token": ["glpat-short"],
    "ibm-cloud-iam": ["ibm_cloud_iam_api_key = os.environ[IBM_KEY]", "ibm cloud iam docs"],
    "ibm-cos-hmac": ["secret_access_key = settings.SECRET_ACCESS_KEY"],
    "jwt": ["eyJ.not.a.token", "eyJhbGciOiJIUzI1NiJ9"],
    "keyword": [
        "the password is stored in the vault",
        'password = "${DB_PASSWORD}"',
        "Enter your password below.",
        'put "/reset-password" => "accounts/passwords#update"',  # a route: `controller#action`
        'password: "/users/:user_id/password/edit"',  # a route template
        'ResetUserPassword = "arn:aws:iam::aws:policy/ResetUserPassword"',  # a constant naming itself, an ARN
        'passwordLabel:"Password:",secretLabel:"Client secret:"',  # a form's labels
    ],
    "mailchimp": ["0123456789abcdef0123456789abcdef"],
    "npm": ["//registry.npmjs.org/ is the registry"],
    "open-ai": ["sk-shortkey"],
    "private-key": ["a private key is kept offline", "-----BEGIN PUBLIC KEY-----"],
    "pypi-token": ["pypi-project-name"],
    "send-grid": ["SG.short.x"],
    "slack": ["xox is not a token", "xoxb-"],
    "softlayer": ['softlayer_api_key = "short"'],
    "square-oauth": ["sq0csp-short"],
    "stripe": ["sk_test_" + "0" * 24, "sk_live_short"],
    "telegram-bot-token": ["12345678:short"],
    "twilio-key": ["ACCOUNT_SETTINGS", "SKIP_THIS_STEP"],
    "pem-private-key": ["-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"],
    "n17q-harness-token": ["n17q_short", "the n17q_ prefix names a harness token"],
    "bearer-token": ["a Bearer token is required", "the bearer of this letter"],
    "url-userinfo": [
        "https://user@example.com/x",
        "ssh://git@github.example/repo",
        "postgres://app:${DB_PASSWORD}@db.internal:5432/app",  # a reference, filled at run time
        "mysql://root:secret@[2001:db8::1]/app",  # the manual's placeholder word, to a documentation address
        "amqp://guest:<password>@rabbit/vhost",
    ],
    "signed-url-param": ["https://x.example/?signature_version=4", "https://x.example/?sig=short"],
    "google-api-key": ["AIza-short"],
    "google-oauth-token": ["ya29.short"],
    "aws-secret-access-key": ['aws_secret_access_key = "${AWS_SECRET_ACCESS_KEY}"', "aws docs: rotate the secret key"],
    "anthropic-api-key": ["sk-ant-short"],
    "openai-api-key": ["sk-proj-short"],
    "huggingface-token": ["hf_hub_download", "hf_short"],
    "github-fine-grained-token": ["github_pat_short"],
    "connection-string-password": [
        "Server=db;Password=;",
        "Password=${DB_PASSWORD};",
        "Server=db;Password=$DB_PASSWORD;",
        "Server=db;Password=arn:aws:secretsmanager:eu-west-1:123456789012:secret:db;",  # where the secret is
    ],
    "url-credential-param": [
        "https://api.example/countries?code=FRANCE-METROPOLITAN",  # a code with no OAuth exchange around it
        "https://app.example/cb?token_type=bearer&expires_in=3600",
        "https://app.example/cb#access_token=[redacted]&state=s1",
        "https://api.example/v1/items?max_tokens=1024&monkey=banana12",
    ],
    "secret-named-value": [
        "token_type=Bearer max_tokens=512",
        "password = ${DB_PASSWORD}",
        "api_key: <YOUR_API_KEY>",
        "secret=xxxx",
        "the next token: expired",
        "auth_token = self.auth_token",
        'fetch(url, {credentials:"same-origin"})',
        '"password": "&lt;YOUR_PASSWORD&gt;"',  # a placeholder as a page escapes it
        "export DATABASE_PASSWORD=\"'$PRECOMPILE_PASSWORD'\"",  # made from another variable at run time
        'sb.append("MasterUserPassword: " + getMasterUserPassword() + ",");',  # code building the value
        '{"/docs/creating-a-strong-password": "/docs/server/auth"}',  # a path as a key names no field
        'url = "//registry.example/:_authToken = "+new Buffer("ci:build").toString("base64")',  # after a closing quote
        'MASTER_PASSWORD = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db-AbCdEf"',  # where it is
        'tokenPlaceholder: "Paste the token here"',  # a form's text
        'resetPasswordRoute = "/account/reset"',
        'apiKeyHelpText: "Find it under Settings"',
    ],
    "vendor-prefixed-token": [
        "snake_case_identifier_with_many_words",
        "get_userAccountSettingsForDisplay2",
        "sk-lf-short",
        "call_" + "wKayJlcYV12NiadiZuJXxcfx",  # an OpenAI tool call's id: a provider's object, not a key
    ],
    "connection-string-credential": ["jdbc:mysql://db:3306/app?user=app", "redis://cache:6379/0"],
    "webhook-url-token": ["https://example.com/webhooks/github", "https://example.com/hooks/pre-commit-config"],
    "aws-secret-key-near-id": ["AKIA-EXAMPLE " + "0123456789abcdef" * 2 + "01234567"],
    "secret-named-pair": [
        '{"name": "MODE", "value": "production"}',
        '{"name": "DB_PASSWORD", "value": "${DB_PASSWORD}"}',  # a reference, filled at run time
        "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef: {name: db, key: password}\n",
        '{"key": "service.name", "value": {"stringValue": "checkout-agent"}}',
        '{"name": "page_token", "value": "<YOUR_TOKEN>"}',
    ],
}


def png(width: int = 24, height: int = 24) -> bytes:
    """A real PNG of random pixels: a binary body that must not look like a secret."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + secrets.token_bytes(width * 3) for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def controls() -> dict[str, Any]:
    """Values that must produce no finding: ids, digests, commit ids, an image, prose about secrets."""
    image = png()
    return {
        "uuids": [str(uuid.uuid4()) for _ in range(20)],
        "uuid_hex": uuid.uuid4().hex,
        "digests": ["sha256:" + hashlib.sha256(secrets.token_bytes(16)).hexdigest() for _ in range(10)],
        "commits": [hashlib.sha1(secrets.token_bytes(16)).hexdigest() for _ in range(10)],
        "short_commits": [hashlib.sha1(secrets.token_bytes(8)).hexdigest()[:7] for _ in range(5)],
        "image": "data:image/png;base64," + base64.b64encode(image).decode(),
        "prose": (
            "To change your password, open Settings. The token expires after an hour; request a new token "
            "when it does. Never share a password or an API token. Password resets and token refreshes are logged."
        ),
        "headings": ["Password policy", "Token lifetime", "Secret rotation", "API keys"],
        "token_type": "Bearer",
        "max_tokens": 512,
        "request_ids": ["req-" + rnd(8, LOWER_ALNUM) for _ in range(5)],
        "timestamps": ["2026-07-01T09:00:05Z", "2026-12-03T05:45:23.277859Z"],
        "urls": ["https://docs.example/keys/rotate", "https://status.example/api/requests/req-7781?expand=owner"],
    }
