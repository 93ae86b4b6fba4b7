"""Field classes no single rule set covers: detectors for the *kind* of a credential rather than one provider's
format, so a vendor neither gitleaks' nor any other list has met is still caught (issue 32, point 3).

- `vendor-prefixed-token`: `<vendor>_live_…`, `sk-lf-…`, `lsv2_pt_…`, `pcsk_…`, and the general shape
  `<short lower-case prefix>[_-]<opaque run of 20 or more>`, the run judged random (`looks_random`), not a word.
- `connection-string-credential`: the password of a JDBC URL (`?password=`, `;password=`, Oracle's
  `user/password@`), or of a database URL whose user is empty (`redis://:password@`); only the password.
- `webhook-url-token`: the token of a Discord, Microsoft Teams or generic `/webhook(s)/<token>` URL (a Slack
  webhook is the reference's `slack-webhook-url`).
- `secret-named-value`: any value assigned to a secret-named field (`is_secret_field`), whatever its entropy, in
  `KEY=value` lines, YAML `key: value`, JSON text and query or form pairs; placeholders excepted (`is_value`, which
  the keyword, connection-string and URL parameter rules of `scanning` apply too).
  JSON containers are masked by key in `scanning.mask_json`, with the same two functions.
- `aws-secret-key-near-id`: a 40-character AWS secret access key within a few hundred characters of an AWS key id.
- `secret-named-pair`: a secret-named field written as a name/value pair object rather than a key (Kubernetes
  `env`, HAR headers, cookies and params, OTLP attributes, cloud tags), in JSON text, YAML, a JSON container
  (`scanning.mask_json`) and an OTLP protobuf's string attributes (`secret_pair_values`).

The class of token boundaries that end at punctuation is handled where the reference's rules are compiled
(`reference.ends_at_punctuation`), for every rule that shares gitleaks' end-of-token group.

Each detector is a `(name, find_bytes, hints)` triple that `scanning.rules()` turns into a `Rule`; this module
imports nothing of `scanning`, so `scanning` can import it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import itertools
import re
from collections.abc import Callable, Iterator

from n17q_engine.world import SYNTHETIC_TOKEN

from .names import MEASURE_SUFFIXES, SECRET_NAME_PARTS
from .reference import compile_rule, decode, iter_spans, shannon_entropy

Finder = Callable[[bytes], Iterator[str]]

# --- secret-named fields ----------------------------------------------------------------------------------------
#
# A name is compared lower-cased with every non-alphanumeric removed (`DB_PASSWORD`, `db-password`, `dbPassword`
# are one name), and for a dotted name only its last part (`config.api_key`, `spring.datasource.password`).
# The parts of a secret's name: the one vocabulary capture intake redacts by (`names.SECRET_NAME_PARTS`), but for
# `signature`, which in free text is mostly a function's (`def f(...)` signatures fill agent output); a signed URL's
# signature is found by its parameter (`url-credential-param`).
_SECRET_PARTS = tuple(part for part in SECRET_NAME_PARTS if part != "signature")
_SECRET_EXACT = frozenset(
    {"pwd", "pass", "pin", "otp", "jwt", "dsn", "sig", "sid", "token", "session", "csrf", "xsrf", "authkey", "appkey"}
)
# Names that hold a secret word but say what the secret is, count it or point at it; and tokens that are not
# credentials: a page cursor (`next_page_token`: masking it breaks the replay of a paginated tool) and a
# tokenizer's special tokens (`eos_token: "</s>"`).
_NOT_SECRET = frozenset(
    {
        "tokentype",
        "tokenizer",
        "secretname",
        "secretref",
        "secretarn",
        "secretid",
        "secretversion",
        "passwordpolicy",
        "passwordhint",
        "credentialtype",
        "credentialsource",
        "credentialid",
        "keyid",
        "accesskeyid",
        "pagetoken",
        "nextpagetoken",
        "nexttoken",
        "prevtoken",
        "previouspagetoken",
        "continuationtoken",
        "synctoken",
        "resumetoken",
        "cursortoken",
        "idempotencytoken",
        "eostoken",
        "bostoken",
        "padtoken",
        "unktoken",
        "septoken",
        "clstoken",
        "masktoken",
        "stoptoken",
    }
)
# A name that measures, describes, labels or points rather than holds: `password_min_length`, `token_ttl`,
# `secret_version`, `passwordLabel`, `resetPasswordRoute`. The one vocabulary of such names: `is_secret_field` reads it
# for the field classes, `is_value` for every rule that reads a value after a password-like name (detect-secrets'
# keyword patterns, which take any name holding `password`, among them).
_MEASURES = (
    *MEASURE_SUFFIXES,
    # or describes it, in free text: `token_type`, `secret_name`, `password_field`, `api_key_url`
    "type",
    "kind",
    "format",
    "path",
    "file",
    "url",
    "uri",
    "endpoint",
    "name",
    "field",
    "env",
    "var",
    "required",
    "enabled",
    "policy",
    "hint",
    "prompt",
    "label",
    "placeholder",
    # or labels it in a user interface (`passwordLabel: "Password:"`, `tokenHelpText`, `secretTitle`) or points at a
    # page (`forgotPasswordRoute`)
    "text",
    "title",
    "message",
    "msg",
    "caption",
    "tooltip",
    "description",
    "button",
    "error",
    "route",
    "selector",
    "set",
    "changed",
    "updated",
    "updatedat",
    "created",
    "createdat",
    "provider",
)
# An environment variable in capitals ending `_KEY` names a key of some vendor (`SHIPPO_KEY`, `STRIPE_KEY`), except
# the data-structure keys.
_ENV_KEY = re.compile(r"^[A-Z][A-Z0-9_]*_KEY$")
_NOT_ENV_KEY = frozenset(
    {"PUBLIC_KEY", "PRIMARY_KEY", "SORT_KEY", "PARTITION_KEY", "CACHE_KEY", "IDEMPOTENCY_KEY", "FOREIGN_KEY"}
    | {"ROUTING_KEY", "HASH_KEY", "RANGE_KEY", "LOOKUP_KEY", "GROUP_KEY", "DEDUP_KEY", "OBJECT_KEY", "S3_KEY"}
)
# A name ending in one of these holds the secret, whatever word comes before: `page_token`, `password_plaintext`.
_HOLDS = ("token", "secret", "password", "passwd", "pass", "pwd", "plaintext", "cleartext")
_NON_ALNUM = re.compile(r"[^a-z0-9]")


def _norm(name: str) -> str:
    """A name as it is compared: its last dotted part, lower-cased, every non-alphanumeric removed."""
    return _NON_ALNUM.sub("", name.rsplit(".", 1)[-1].strip("-_ ").lower())


def _describes(norm: str) -> bool:
    """Whether a (normalized) name says what a secret is, measures, labels or points at it rather than holding it."""
    return norm in _NOT_SECRET or (norm.endswith(_MEASURES) and not norm.endswith(_HOLDS))


@functools.lru_cache(maxsize=16384)
def is_secret_field(name: str) -> bool:
    """Whether a value assigned to `name` is a credential, whatever the value looks like.

    Bare `key` is not one (a cache key, an OTLP attribute's `{"key": "service.name"}`, a sort key), nor `auth`
    (`auth: oauth2` names a scheme); `api_key`, `SHIPPO_API_KEY`, `client_secret`, `access_token`, `password`,
    `DB_PASS` are."""
    if "/" in name or " " in name.strip():
        # A path or a sentence used as a key (`"/en/…/creating-a-strong-password": "/en/…"`, a docs redirect map)
        # names no field.
        return False
    last = name.rsplit(".", 1)[-1].strip("-_ ")
    norm = _norm(name)
    if len(norm) < 3 or _describes(norm):
        return False
    if norm in _SECRET_EXACT:
        return True
    if _ENV_KEY.match(last) and last not in _NOT_ENV_KEY:
        return True
    if norm.endswith(("token", "pass", "pwd", "apikey", "secretkey", "authkey", "appkey", "clientkey", "serverkey")):
        return True
    return any(part in norm for part in _SECRET_PARTS)


# What a secret-named field holds when it holds no secret: a placeholder, a type name in a schema, a reference to
# where the secret is (`${VAR}`, `$VAR`, `os.environ[…]`, `settings.SECRET_KEY`), a boolean. `changeme`, `admin`
# and `password123` are not here: a default credential left in place is a working credential, and masking it costs
# the reader nothing.
_NOT_A_VALUE = frozenset(
    {
        "true",
        "false",
        "null",
        "none",
        "nil",
        "undefined",
        "empty",
        "required",
        "optional",
        "string",
        "str",
        "bytes",
        "int",
        "integer",
        "number",
        "boolean",
        "bool",
        "object",
        "secret",
        "password",
        "token",
        "hidden",
        "redacted",
        "masked",
        "removed",
        "omitted",
        "notset",
        "unset",
        "n/a",
        "tbd",
        "todo",
        "your_token",
        "your_api_key",
        "your_password",
        "your-api-key",
        "example",
        # fetch()'s `credentials:` modes, in every page's JavaScript
        "same-origin",
        "include",
        "omit",
        # an Authorization header's scheme: the credential follows it (and the bearer-token rule takes it)
        "bearer",
        "basic",
        "digest",
    }
)
# Documentation's stand-ins: `AKIAIOSFODNN7EXAMPLE`, `sha256~XXXXXXXX_PUT_YOUR_TOKEN_HERE`, `ops_eyJ…...` (cut
# short), `<YOUR_KEY>`.
_STAND_IN = re.compile(r"(?i)example|your[_\s-]|_here\b|x{6,}|\*{3,}|•{3,}|(?:\.\.\.|…)$")
_PLACEHOLDER_VALUE = re.compile(
    r"""^(?:
        \[[^\]]*\] | <[^>]*> | \$\{[^}]*\} | \{\{[^}]*\}\} | \$\(?[A-Za-z_][A-Za-z0-9_]*\)? | %\([^)]*\)s | %s
        | [*xX•.·#_-]+ | [*xX•]{3,}.{0,4}
        | (?:os\.environ|os\.getenv|process\.env|env|ENV|System\.getenv|getenv)\b.*
    )$""",
    re.X,
)
# A value that starts by interpolating a variable (`$REACT_APP_BASE_URL/forgot`, `'$PRECOMPILE_PASSWORD'`,
# `"${DB_PASSWORD}"`) is made from configuration at run time: a reference, not a secret.
_INTERPOLATED = re.compile(r"""^["']?\$\{?[A-Za-z_][A-Za-z0-9_]*""")
# Code that builds the value (`"MasterUserPassword: " + getMasterUserPassword() + ","`): a string concatenated with an
# expression, or a call; or a "value" that opens with `+` and a call (`"…:_password = "+new Buffer("…")`: the quote
# before it closed a string, and what follows concatenates one). A `+` alone opens no code: one AWS secret key in 64
# starts with it.
_CONCATENATED = re.compile(r"""["'`]\s*\+|\+\s*["'`]|[A-Za-z_]\w*\([^)]*\)|^\+\s*(?:new\s+)?[A-Za-z_$][\w$.]*\s*\(""")
# Names of things, not secrets: an Amazon resource name (`arn:<partition>:<service>:<region>:<account>:<resource>`,
# a Secrets Manager secret's too: it says where the secret is), a Rails route's `controller#action`
# (`cms/sites/passwords#edit`, `passwords#update`) and a route template with a `:param` segment
# (`/passwords/:id/edit`). No key has the shape: a route needs lower-case words around its `#` and a `/` in the
# controller or one of Rails' seven actions; a path needs its `/:`.
_RESOURCE_NAME = re.compile(
    r"""^(?:
        arn:[a-z][a-z0-9-]*:[a-z0-9-]+:[a-z0-9-]*:[a-z0-9-]*:\S+
        | [a-z_][a-z0-9_]*(?:/[a-z_][a-z0-9_]*)+\#[a-z_][a-z0-9_]*
        | [a-z_][a-z0-9_]*\#(?:index|show|new|create|edit|update|destroy)
        | (?:/[A-Za-z0-9_.~-]*)*/:[A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z0-9_.~:-]*)*
    )$""",
    re.X,
)
# A name that is only a secret word (`password`, `api_key`, `token`) says nothing a value holding it would repeat:
# `password = "password!2024"` is a password. A longer name found whole in its value is a constant naming itself
# (`IAMUserChangePassword = "arn:…:policy/IAMUserChangePassword"`, `RESET_PASSWORD = "auth:RESET_PASSWORD"`).
_BARE_SECRET_NAMES = _SECRET_EXACT | frozenset(SECRET_NAME_PARTS) | {"key", "secretkey", "passwd", "pass"}
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_-]")
# A dotted path of identifiers is a reference to the secret (`settings.SECRET_KEY`, `self.password`), not one.
_CODE_OPERATORS = ("||", "&&", "=>", "==", "!=")
_IDENTIFIER_PATH = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)+$")


# A body repeats its assignments (a log, a config dumped per request, the hostile body of near-matches in
# benchmarks/bench_capture.py): each distinct (value, name) is judged once. Bounded, so no body can grow it.
@functools.lru_cache(maxsize=1 << 16)
def is_value(value: str, name: str = "") -> bool:
    """Whether `value`, assigned to a secret-named field `name`, is a secret: not a placeholder, a reference, code,
    the name of a thing (an ARN, a route, the constant it is assigned to), nor under a name that measures, labels or
    points (`_describes`). The one judgement of every rule that reads a value after a password-like name: the
    secret-named values here, detect-secrets' keyword patterns, a connection string's and a URL's parameters
    (`scanning`)."""
    # HTML-escaped as a page shows it (`&lt;YOUR_PASSWORD&gt;`): judged as what it stands for.
    value = html.unescape(value).strip() if "&" in value else value.strip()
    if not value:
        return False
    if _INTERPOLATED.match(value) or _CONCATENATED.search(value):
        return False
    if SYNTHETIC_TOKEN.fullmatch(value):
        return False  # the fixture world's own token for one replay (n17q_engine.world), whole: it authorizes nothing
    low = value.lower()
    if low in _NOT_A_VALUE or _PLACEHOLDER_VALUE.match(value) or _IDENTIFIER_PATH.match(value):
        return False
    if any(op in value for op in _CODE_OPERATORS):  # `i.credentials||S.credentials`: an expression
        return False
    if _STAND_IN.search(value) or _RESOURCE_NAME.match(value):
        return False
    return not (name and (_describes(_norm(name)) or _names_itself(value, name)))


def _names_itself(value: str, name: str) -> bool:
    """Whether `value` is, or holds whole, the name it is assigned to (`PASSWORD_FIELD = "password_field"`)."""
    last = name.rsplit(".", 1)[-1].strip("-_ ")
    norm = _norm(name)
    if norm and _NON_ALNUM.sub("", value.lower()) == norm:
        return True
    if not last or norm in _BARE_SECRET_NAMES:
        return False
    at = value.lower().find(last.lower())
    while at >= 0:
        before, after = value[at - 1 : at] if at else "", value[at + len(last) : at + len(last) + 1]
        if not _TOKEN_CHAR.match(before) and not _TOKEN_CHAR.match(after):
            return True
        at = value.lower().find(last.lower(), at + 1)
    return False


# The name before `=`, `:`, `:=` or `=>`: any identifier holding a secret word, judged by `is_secret_field` (the
# pattern only finds candidates). The value: quoted (up to its closing quote, JSON-escaped quotes too), or a run that
# stops at white space, a quote, `&`, `;`, `,` or a bracket, and is followed by one of those or the end (a value
# followed by `(` or `[` is code, `token=get_token()`).
_NAME_WORDS = (
    "pass|pwd|secret|token|key|credential|cookie|session|sid|csrf|xsrf|dsn|pin|otp|jwt|sig|auth|conn|assertion|"
    "recovery|backup|seed"
)
_NAME = r"([A-Za-z0-9_.-]*(?i:" + _NAME_WORDS + r")[A-Za-z0-9_.-]*)"
_ASSIGNED = (
    r"(^|[\r\n]?)[ \t>#-]*" + _NAME + r"""\\?["']?[ \t]*(:=|=>|=|:)[ \t]*"""
    r"""(?:\\"([^"\\\r\n]{1,256})\\"|"([^"\\\r\n]{1,256})"|'([^'\\\r\n]{1,256})'|"""
    r"""([^\s"'`<>&;,(){}\[\]\\]{1,256})(?:[\s"'`<>&;,)}\]\\]|$))"""
)
_TRAILING = ".,!?:"


def _secret_named_values() -> Finder:
    regex = compile_rule(_ASSIGNED)

    def find(data: bytes) -> Iterator[str]:
        # A body that repeats one assignment (a log, a hostile body of near-matches: benchmarks/bench_capture.py)
        # is judged once per distinct assignment, not once per occurrence.
        judged: dict[tuple[bytes, bool], str | None] = {}
        for spans in iter_spans(regex, data):
            at_line_start = spans[1][0] >= 0 and (spans[1][0] == 0 or spans[1][1] > spans[1][0])
            key = (data[max(0, spans[2][0] - 1) : spans[0][1]], at_line_start)
            if key not in judged:
                judged[key] = _judged(data, spans, at_line_start)
            value = judged[key]
            if value is not None:
                yield value

    return find


def _judged(data: bytes, spans: list[tuple[int, int]], at_line_start: bool) -> str | None:
    """The secret one `_ASSIGNED` match assigns, or None when it assigns none."""
    name = decode(data[spans[2][0] : spans[2][1]])
    if spans[2][0] > 0 and data[spans[2][0] - 1 : spans[2][0]] in (b"/", b"#"):
        return None  # the last segment of a path or a fragment (`/creating-a-strong-password": …`): no field
    if not is_secret_field(name):
        return None
    start, stop = next(((a, b) for a, b in spans[4:] if b > a >= 0), (-1, -1))
    if start < 0:
        return None
    value = decode(data[start:stop])
    if _STAND_IN.search(value):
        return None
    if spans[7][0] >= 0:  # unquoted: a sentence's full stop is not part of it
        value = value.rstrip(_TRAILING)
        # `name: word` in prose ("the next token: expired") is no assignment; at the start of a line (YAML, a header)
        # it is, and so is any value that is not one lower-case word.
        prose = data[spans[3][0] : spans[3][1]] == b":" and not at_line_start
        if prose and value.isalpha() and value.islower():
            return None
    return value if is_value(value, name) else None


# --- vendor-prefixed tokens -------------------------------------------------------------------------------------
#
# A token starts where no token character is before it: a piece of a longer token (`…AbC_d9…` inside an OpenAI
# key) is not a vendor's token of its own.
_NOT_INSIDE_A_TOKEN = r"(?:^|[^A-Za-z0-9_-])"
# Providers of the last few years give every key a readable prefix and a random body: `sk-lf-` (Langfuse),
# `lsv2_pt_` (LangSmith), `pcsk_` (Pinecone), `shippo_live_`, `rk_test_`. The known shapes are matched with a low
# entropy floor; any other `<prefix>[_-]<body>` only when its body reads as random (`looks_random`).
_KNOWN_VENDOR = (
    _NOT_INSIDE_A_TOKEN + r"((?:sk|pk)-lf-[A-Za-z0-9-]{20,}|lsv2_(?:pt|sk)_[A-Za-z0-9_]{20,}|pcsk_[A-Za-z0-9_]{20,})"
)
# `<vendor>_live_<body>` and its test, prod and sandbox kin: the body's longest `_`/`-` part must be one opaque
# run (`run_test_case_12_with_setup` is a test's name, not a key).
_LIVE_VENDOR = _NOT_INSIDE_A_TOKEN + r"([a-z][a-z0-9]{1,15}[_-](?:live|test|prod|sandbox)[_-])([A-Za-z0-9_-]{16,})"
# A prefix: one to three lower-case words of up to ten characters, each starting with a letter (`sk`, `rdme`,
# `dp_pt`, `lin_api`); then the body: 20 or more letters and digits.
# The match is the whole token, later `_`/`-` parts included, so a token a provider's rule names is the same value
# (one finding, the provider's).
_GENERIC_VENDOR = (
    _NOT_INSIDE_A_TOKEN
    + r"((?:[a-z][a-z0-9]{0,9}[_-]){1,3})([A-Za-z0-9]{20,200})((?:[_-][A-Za-z0-9]+)*)(?:[^A-Za-z0-9_-]|$)"
)
# The same shape is how providers name objects: `call_…` and `chatcmpl-…` (OpenAI), `msg_01…` and `toolu_01…`
# (Anthropic), `pi_…` and `evt_…` (Stripe), all over an agent's run. Those bodies are 14 to 30 characters; keys
# run longer (`xai-` 80, `gsk_` 52, `pplx-` 48, `tvly-` 32). A body of 20 to 31 counts only after a prefix that
# names a credential (`_CREDENTIAL_PREFIX`): `sk`, `api`, `key`, `token`, `pat`, `live`, … or a prefix ending in
# one (`pcsk`, `glpat`, `nvapi`); any other prefix needs a body of `_BARE_BODY` or more.
_CREDENTIAL_PARTS = frozenset(
    {"sk", "rk", "key", "api", "apikey", "secret", "sec", "token", "tok", "pat", "auth", "live", "prod", "priv"}
    | {"private", "access", "oauth", "bot", "pass", "pwd", "cred", "sess", "session"}
)
_CREDENTIAL_ENDINGS = ("sk", "pat", "key", "token", "api", "secret")
_BARE_BODY = 32


def credential_prefix(prefix: str) -> bool:
    parts = [p for p in re.split(r"[_-]", prefix.lower()) if p]
    return any(p in _CREDENTIAL_PARTS or p.endswith(_CREDENTIAL_ENDINGS) for p in parts)


_KNOWN_BODY_ENTROPY = 3.0
_BODY_ENTROPY = 3.5


def looks_random(body: str) -> bool:
    """Whether a run of letters and digits reads as random (base62) rather than as an identifier or a word.

    A random body mixes upper case, lower case and digits and switches between them often (about six characters
    in ten for base62); an identifier (`userAccountSettings2`) runs long in lower case between capitals, a digest
    is one case only. Measured in tests/fixtures_review/test_field_classes.py: random bodies of 20 to 64 characters
    pass 97 to 99.5 in 100 (5,000 of each length); of 11,644 identifiers of that shape in the installed packages'
    source none is a token."""
    n = len(body)
    upper = sum(c.isupper() for c in body)
    lower = sum(c.islower() for c in body)
    digits = n - upper - lower
    if upper < 2 or lower < 2:
        return False
    kinds = ["u" if c.isupper() else "l" if c.islower() else "d" for c in body]
    ratio = sum(a != b for a, b in itertools.pairwise(kinds)) / (n - 1)
    if ratio < 0.33 or (digits == 0 and (ratio < 0.5 or upper < 3)):
        return False
    longest = max(len(run) for run in re.findall(r"[a-z]+", body))
    return longest < (8 if n <= 40 else 10) and shannon_entropy(body) >= _BODY_ENTROPY and not _base64_of_text(body)


def _base64_of_text(body: str) -> bool:
    """Whether `body` is base64 of readable text (`YmVkcm9jay5hbWF6b25hd3M…` is "bedrock.amazonaws…"): an encoded
    name, not a random key, whose bytes would be printable about four times in ten."""
    cut = body[: len(body) - len(body) % 4]
    try:
        raw = base64.b64decode(cut, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) >= 12 and sum(32 <= b < 127 for b in raw) >= 0.9 * len(raw)


def _opaque(body: str, floor: float) -> bool:
    return (
        sum(c.isdigit() for c in body) >= 2 and sum(c.isalpha() for c in body) >= 2 and (shannon_entropy(body) >= floor)
    )


# The three shapes in one pass (RE2 tries them in this order at each start): groups 1 (known), 2-3 (live), 4-6
# (generic).
_VENDOR = (
    _NOT_INSIDE_A_TOKEN
    + "(?:"
    + "|".join(p.removeprefix(_NOT_INSIDE_A_TOKEN) for p in (_KNOWN_VENDOR, _LIVE_VENDOR, _GENERIC_VENDOR))
    + ")"
)


def _vendor_tokens() -> Finder:
    regex = compile_rule(_VENDOR)

    def find(data: bytes) -> Iterator[str]:
        for spans in iter_spans(regex, data):
            if spans[1][0] >= 0:
                token = decode(data[spans[1][0] : spans[1][1]])
                body = token.split("_", 1)[-1].removeprefix("sk-lf-").removeprefix("pk-lf-")
                if _opaque(body, _KNOWN_BODY_ENTROPY):
                    yield token
            elif spans[2][0] >= 0:
                body = decode(data[spans[3][0] : spans[3][1]])
                longest = max(re.split(r"[_-]", body), key=len)
                one_case = longest.lower() == longest or longest.upper() == longest
                if len(longest) >= 16 and (
                    looks_random(longest) or (one_case and _opaque(longest, _KNOWN_BODY_ENTROPY))
                ):
                    yield decode(data[spans[2][0] : spans[3][1]])
            else:
                body = decode(data[spans[5][0] : spans[5][1]])
                if len(body) < _BARE_BODY and not credential_prefix(decode(data[spans[4][0] : spans[4][1]])):
                    continue
                if looks_random(body):
                    yield decode(data[spans[4][0] : spans[6][1]])

    return find


# --- connection strings ---------------------------------------------------------------------------------------
#
# `url-userinfo` (scanning.N17Q_RULES) takes `scheme://user:password@`; these are the shapes it cannot: a JDBC URL's
# password parameter, Oracle's thin `user/password@host`, and a URL whose user is empty (`redis://:password@host`).
_CONNECTION = (
    r"(?i)\bjdbc:[a-z0-9:]+[^\s\"'<>]*?[?&;](?:password|pwd|pass)=([^&;\s\"'<>]{1,256})",
    r"(?i)\bjdbc:oracle:[a-z]+:[A-Za-z0-9_$#.-]+/([^@\s\"'<>/]{1,256})@",
    r"(?i)\b[a-z][a-z0-9+.-]{1,20}://:([^/\s@\"'<>]{1,256})@[^\s\"'<>]",
)


def _connection_strings() -> Finder:
    compiled = tuple(compile_rule(p) for p in _CONNECTION)

    def find(data: bytes) -> Iterator[str]:
        for regex in compiled:
            for spans in iter_spans(regex, data):
                value = decode(data[spans[1][0] : spans[1][1]])
                if is_value(value):
                    yield value

    return find


# --- webhook URLs ---------------------------------------------------------------------------------------------
#
# A webhook URL is its own credential: whoever has it can post. The token part is masked; the host and the path
# before it stay readable. A generic `/webhook(s)/…` or `/hooks/…` segment counts when it is long and random (a
# UUID, base62, hex): `/webhooks/github` is a route, `/hooks/3x9…` a token.
_WEBHOOK_KNOWN = (
    r"(?i)discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/([A-Za-z0-9_-]{60,100})",
    r"(?i)webhook\.office\.com/webhookb2/[^\s\"'<>]{1,200}?/IncomingWebhook/([A-Za-z0-9]{32})/",
    # Teams' newer URLs end in a signature of their own, `/V2<43 characters>`, after the reference's match.
    r"(?i)webhook\.office\.com/webhookb2/[^\s\"'<>]{1,200}?/IncomingWebhook/[^\s\"'<>]{1,200}?/(V2[A-Za-z0-9_-]{20,})",
)
_WEBHOOK_GENERIC = r"(?i)/(?:webhooks?|hooks)/(?:[A-Za-z0-9_.-]{1,64}/){0,4}([A-Za-z0-9_-]{20,200})"


def _webhook_token(segment: str) -> bool:
    """A path segment that is a token: random base62, or lower-case letters and digits (hex, a UUID, Mattermost's
    26, of which one in four is a digit) with enough of both; not a route's words (`github-events`,
    `pre-commit-config-v2`)."""
    if shannon_entropy(segment) < 3.5:
        return False
    plain = segment.replace("-", "").replace("_", "")
    if looks_random(plain):
        return True
    letters = sum(c.isalpha() for c in plain)
    digits = len(plain) - letters
    return letters >= 4 and digits >= max(3, len(plain) // 10)


def _webhook_tokens() -> Finder:
    known = tuple(compile_rule(p) for p in _WEBHOOK_KNOWN)
    generic = compile_rule(_WEBHOOK_GENERIC)

    def find(data: bytes) -> Iterator[str]:
        for regex in known:
            for spans in iter_spans(regex, data):
                yield decode(data[spans[1][0] : spans[1][1]])
        for spans in iter_spans(generic, data):
            token = decode(data[spans[1][0] : spans[1][1]])
            if _webhook_token(token):
                yield token

    return find


# --- AWS secret keys beside their key id ----------------------------------------------------------------------
#
# A secret access key has no prefix of its own: 40 characters of base64. The reference finds it only after an AWS
# key name; a key id (`AKIA…`, `ASIA…`, or one a scan already masked) within a few hundred characters says what
# a random 40 beside it is: a credentials CSV line, `{"id": "AKIA…", "value": "…"}`.
_AWS_ID = r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b|\[masked:aws[a-z-]*\]"
_AWS_SECRET = r"(?:^|[^A-Za-z0-9/+])([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"
AWS_PAIR_WINDOW = 300


def _aws_secret_near_id() -> Finder:
    ids = compile_rule(_AWS_ID)
    secret = compile_rule(_AWS_SECRET)

    def find(data: bytes) -> Iterator[str]:
        last = 0
        for spans in iter_spans(ids, data):
            start, stop = spans[0]
            lo = max(last, start - AWS_PAIR_WINDOW)
            window = data[lo : stop + AWS_PAIR_WINDOW]
            last = stop + AWS_PAIR_WINDOW
            for inner in iter_spans(secret, window):
                value = decode(window[inner[1][0] : inner[1][1]])
                upper = sum(c.isupper() for c in value)
                lower = sum(c.islower() for c in value)
                if upper >= 4 and lower >= 4 and shannon_entropy(value) >= 4.0:
                    yield value

    return find


# --- name/value pairs -----------------------------------------------------------------------------------------
#
# A field written as an object of its name and its value rather than as a key: a Kubernetes container's
# `env: [{name: DB_PASSWORD, value: …}]`, a HAR file's headers, cookies and form params (`{"name": …, "value": …}`),
# OTLP attributes in JSON (`{"key": "http.request.header.cookie", "value": {"stringValue": …}}`), cloud tags
# (`{"Key": …, "Value": …}`). The name is judged as a key would be (`is_secret_field`), the value as a key's value
# (`is_value`): one judgement, whichever way the field is written.
PAIR_NAME_KEYS = ("name", "key", "Name", "Key")
PAIR_VALUE_KEYS = frozenset({"value", "Value"})
_ANY_VALUE_STRING = "stringValue"  # OTLP JSON's AnyValue


def secret_pair_name(obj: dict) -> str | None:
    """The secret-named field `obj` writes as a name/value pair (`{"name": "DB_PASSWORD", "value": …}`), or None."""
    if not ("value" in obj or "Value" in obj):
        return None
    name = next((obj[k] for k in PAIR_NAME_KEYS if isinstance(obj.get(k), str)), None)
    return name if name is not None and is_secret_field(name) else None


def pair_secret(value: object, name: str) -> str | None:
    """The secret a pair named `name` holds in its `value` (a string, or OTLP's `{"stringValue": …}`), or None."""
    if isinstance(value, dict) and isinstance(value.get(_ANY_VALUE_STRING), str):
        value = value[_ANY_VALUE_STRING]
    return value if isinstance(value, str) and is_value(value, name) else None


def secret_pair_values(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """{value: "secret-named-pair"} for the (name, value) pairs whose name is secret-named and whose value is a value
    (an OTLP protobuf's string attributes, read by their key: `http.request.header.cookie`)."""
    return {value: "secret-named-pair" for name, value in pairs if is_secret_field(name) and is_value(value, name)}


# In text: JSON (`"name": "…", "value": "…"`, OTLP's `"value": {"stringValue": "…"}`) and YAML (`- name: …` with
# `value: …` on the next line), the name first as every producer above writes it.
_PAIR_NAME = r"""["']?(?:name|key|Name|Key)["']?[ \t]*:[ \t]*["']?([A-Za-z0-9_.:/-]{1,128})["']?"""
_PAIR_TEXT = (
    _PAIR_NAME
    + r"""[ \t]*(?:,[ \t\r\n]{0,64}|\r?\n[ \t]*-?[ \t]*)["']?(?:value|Value)["']?[ \t]*:[ \t]*"""
    + r"""(?:\{[ \t]*"stringValue"[ \t]*:[ \t]*)?"""
    + r"""(?:"([^"\\\r\n]{1,512})"|'([^'\\\r\n]{1,512})'|([^\s"',{}\[\]]{1,512}))"""
)


def _secret_named_pairs() -> Finder:
    regex = compile_rule(_PAIR_TEXT)

    def find(data: bytes) -> Iterator[str]:
        judged: dict[bytes, str | None] = {}
        for spans in iter_spans(regex, data):
            key = data[spans[0][0] : spans[0][1]]
            if key not in judged:
                name = decode(data[spans[1][0] : spans[1][1]])
                start, stop = next(((a, b) for a, b in spans[2:] if b > a >= 0), (-1, -1))
                value = decode(data[start:stop]) if start >= 0 else ""
                judged[key] = value if value and is_secret_field(name) and is_value(value, name) else None
            found = judged[key]
            if found is not None:
                yield found

    return find


def field_class_rules() -> tuple[tuple[str, Finder, tuple[str, ...]], ...]:
    """(name, find_bytes, hints) of every field class, for `scanning.rules()`."""
    return (
        ("secret-named-value", _secret_named_values(), tuple(_NAME_WORDS.split("|"))),
        ("vendor-prefixed-token", _vendor_tokens(), ()),  # every match holds `_` or `-`: no text is spared
        ("connection-string-credential", _connection_strings(), ("jdbc:", "://:")),
        ("webhook-url-token", _webhook_tokens(), ("hooks/", "webhook.office.com")),
        ("aws-secret-key-near-id", _aws_secret_near_id(), ("akia", "asia", "abia", "acca", "masked:aws")),
        ("secret-named-pair", _secret_named_pairs(), ("value",)),
    )
