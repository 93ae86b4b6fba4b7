"""Secret scanning and masking: what intake (captures) and the run importer (bundles) run on every text before
anything is stored, so nothing detected is written in the clear (DESIGN §7).

Django-free and database-free (an import-linter contract keeps it so): the capture intake
(`fixtures_review.intake`), the run importer (`runs.importer`), the benchmarks and the labelled corpus tests call
it directly. It is not part of `n17q_engine` because detect-secrets imports `requests` (for its optional
verification, never used here), and the engine's contract forbids network clients.

The rules: gitleaks' default rule set first (`n17q_secrets.reference`, vendored), then detect-secrets' detectors
and the project's own rules only for what the reference lacks. A finding keeps its rule, its path and a masked
preview, never the value.

Paths name a place: `request.headers.Authorization`, `response.body.items[0].token`; keys that are not plain
identifiers are quoted: `body["a.b"]`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import ahocorasick
import re2

from . import field_classes
from .names import is_oauth_code, is_secret_value_name, is_signed_url_param
from .reference import compile_rule, decode, iter_spans, reference_rules, shannon_entropy, utf8
from .reference.nosey_parker import nosey_parker_rules

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


# --- secret scanning -------------------------------------------------------------------------------------------
#
# Every rule runs on RE2 over the text's UTF-8 bytes (`reference.compile_rule`), so a hostile body costs time in
# proportion to its size whatever it holds: the reference's rules, the project's own, and detect-secrets'
# detectors (their patterns compiled on RE2; `_to_re2` rewrites the one construct RE2 lacks that they use, a
# look-behind for "not after a word character"). Every rule reports every match in one pass; masking then
# replaces every occurrence of every value found in one pass over the text (an Aho-Corasick automaton of the
# values), so a body of ten thousand secrets costs ten thousand replacements, not ten thousand passes.


@dataclass(frozen=True)
class Rule:
    """One detector: a name (the finding's `rule`), how it finds values in a text's UTF-8 bytes, where it comes
    from, and lower-case substrings one of which every match holds (a rule runs only on a text that has one)."""

    name: str
    find_bytes: Callable[[bytes], Iterator[str]]
    source: str  # "noseyparker" | "detect-secrets" | "n17q"
    hints: tuple[str, ...] = ()
    gate: str = ""  # an RE2 pattern every text the rule finds something in matches (`Prefilter`)

    def find(self, text: str) -> Iterator[str]:
        return self.find_bytes(utf8(text))


def _re2_finder(
    patterns: tuple[str, ...],
    pick: Callable[[bytes, list[tuple[int, int]]], bytes],
    *,
    context: int | None = None,
) -> Callable[[bytes], Iterator[str]]:
    """Each match's value as `pick` takes it. With `context` (the bytes before a match `pick` may read), a match
    met again with the same bytes before it is taken as the first was: a body repeats its assignments (a log, the
    hostile body of near-matches in benchmarks/bench_capture.py), and a judging `pick` then runs once each."""
    compiled = tuple(compile_rule(p) for p in patterns)

    def find(data: bytes) -> Iterator[str]:
        for regex in compiled:
            picked: dict[bytes, bytes] = {}  # per pattern: another's groups may lie elsewhere in the same text
            for spans in iter_spans(regex, data):
                if context is None:
                    value = pick(data, spans)
                else:
                    key = data[max(0, spans[0][0] - context) : spans[0][1]]
                    if key not in picked:
                        picked[key] = pick(data, spans)
                    value = picked[key]
                if value:
                    yield decode(value)

    return find


def _group(n: int) -> Callable[[bytes, list[tuple[int, int]]], bytes]:
    def pick(data: bytes, spans: list[tuple[int, int]]) -> bytes:
        start, stop = spans[n]
        return data[start:stop] if start >= 0 else b""

    return pick


def _first_group(data: bytes, spans: list[tuple[int, int]]) -> bytes:
    return next((data[a:b] for a, b in spans[1:] if b > a >= 0), b"")


def _regex(pattern: str, group: int = 0) -> Callable[[bytes], Iterator[str]]:
    return _re2_finder((pattern,), _group(group))


# A URL's query or fragment parameter whose name is a credential's (`n17q_secrets.names`, the names capture intake
# redacts by): `…/cb#access_token=…&id_token=…` in a redirect recorded by a trace, `?code=…&state=…`, a `Link` header's
# `<…?access_token=…>`. The pattern takes only names that end like a credential's, so a long form of other fields
# costs no call; the names' own rules then decide (an OAuth `code` needs its neighbours, read from the same URL).
_URL_PARAM_NAME_ENDS = (
    "token|secret|passwd|password|pwd|pass|key|sig|signature|session|sess[_-]?id|session[_-]?id|sid|csrf|xsrf|code|"
    "verifier|assertion|credential|credentials|auth|samlresponse|samlrequest|jwt|otp|pin|dsn|googleaccessid|policy|"
    "key-pair-id"
)
_URL_PARAM = rf"(?i)([?#&])([A-Za-z0-9_.-]{{0,48}}?(?:{_URL_PARAM_NAME_ENDS}))=([^&#\s\"'<>\\]{{6,}})"
_URL_PARAM_RE = compile_rule(_URL_PARAM)
_URL_NAME = re.compile(rb"[?#&]([A-Za-z0-9_.-]{1,64})=")
_URL_WINDOW = 1024
_URL_CONTEXT_CHECKS = 2000
_NON_WORD = re.compile(r"[^a-z0-9]")
_URL_RUN_END = re.compile(rb"[\s\"'<>\\]")


def _url_credential_params(data: bytes) -> Iterator[str]:
    checked = 0
    for spans in iter_spans(_URL_PARAM_RE, data):
        (start, _), (n0, n1), (v0, v1) = spans[1], spans[2], spans[3]
        name = decode(data[n0:n1])
        if not field_classes.is_value(decode(data[v0:v1]), name):
            continue  # a stand-in (`?access_token=ACCESS_TOKEN`, `${TOKEN}`): one judgement for every named value
        if is_signed_url_param(name) or is_secret_value_name(name):
            yield decode(data[v0:v1])
            continue
        checked += 1
        if checked > _URL_CONTEXT_CHECKS:
            # A text of thousands of `code=` parameters is no URL anyone follows: fail closed, each one masked.
            if _NON_WORD.sub("", name.lower()) == "code":
                yield decode(data[v0:v1])
            continue
        # The URL the parameter belongs to: from the last space or quote before it to the next one after it, within
        # _URL_WINDOW bytes either side (a callback's URL is shorter; a long text must not cost a long read per match).
        floor = max(0, start - _URL_WINDOW)
        before = data[floor:start]
        run_start = floor + max(before.rfind(c) for c in (b" ", b'"', b"'", b"<", b"\n", b"\t")) + 1
        ceiling = min(len(data), v1 + _URL_WINDOW)
        found = _URL_RUN_END.search(data, v1, ceiling)
        run = data[run_start : found.start() if found else ceiling]
        in_fragment = b"#" in data[run_start : start + 1]
        names = [decode(m) for m in _URL_NAME.findall(run)]
        if is_oauth_code(name, names, in_fragment=in_fragment):
            yield decode(data[v0:v1])


# An ADO or ODBC connection string's password (`Server=db;…;Password=…;`), judged as every value after a
# password-like name is (`field_classes.is_value`: `Password=$DB_PASSWORD;` names a variable).
_CONNECTION_PASSWORD_RE = compile_rule(r"(?i)(?:^|;)\s*(password|pwd)\s*=\s*([^;\s\"']{4,})")


def _connection_string_password(data: bytes) -> Iterator[str]:
    for spans in iter_spans(_CONNECTION_PASSWORD_RE, data):
        value = decode(data[spans[2][0] : spans[2][1]])
        if field_classes.is_value(value, decode(data[spans[1][0] : spans[1][1]])):
            yield value


# Credentials in any URL: scheme://user:password@host, user and password together (a user name can be the
# credential, as a Sidekiq licence's is); the password judged as every value after a password-like name is
# (`field_classes.is_value`): `postgres://user:${DB_PASSWORD}@db`, `user:password@` and `user:secret@` in a manual are
# references and placeholders, `user:D1fficultP%40ssw0rd@` is a password.
_URL_USERINFO_RE = compile_rule(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://(([^/\s:@\"'<>]+):([^/\s@\"'<>]+))@[^\s\"'<>]")


def _url_userinfo(data: bytes) -> Iterator[str]:
    for spans in iter_spans(_URL_USERINFO_RE, data):
        if field_classes.is_value(decode(data[spans[3][0] : spans[3][1]]), "password"):
            yield decode(data[spans[1][0] : spans[1][1]])


# The project's own rules, only for what the reference rule set (gitleaks', n17q_secrets/reference/) lacks:
# the console's own token, credentials by place (a bearer header value, URL user info, a signed URL's signature, a
# connection string's password), Google OAuth access tokens and AWS secret access keys. Each has a labelled
# corpus in the tests.
N17Q_RULES: tuple[tuple[str, Callable[[bytes], Iterator[str]]], ...] = (
    ("n17q-harness-token", _regex(r"n17q_[A-Za-z0-9_-]{43}")),
    ("bearer-token", _regex(r"\b[Bb]earer\s+([A-Za-z0-9._~+/-]{16,}=*)", 1)),
    ("url-userinfo", _url_userinfo),
    (
        "signed-url-param",
        _regex(
            r"(?i)[?&](?:X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|X-Goog-Signature|X-Goog-Credential|"
            r"Signature|sig)=([A-Za-z0-9%/+=_.-]{16,})",
            1,
        ),
    ),
    ("google-oauth-token", _regex(r"ya29\.[0-9A-Za-z_-]{20,}")),
    # An AWS secret access key after an AWS key name: the reference has a rule for key ids only, and its generic
    # rule misses a key that starts with `/` or `+` (as one in sixteen do).
    (
        "aws-secret-access-key",
        _regex(r"(?i)aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?['\"]([0-9a-zA-Z/+]{40})['\"]", 1),
    ),
    ("connection-string-password", _connection_string_password),
    ("url-credential-param", _url_credential_params),
)

# A value assigned to a password-like name in quotes (`db_password = "…"`, `secret: '…'`, `"…" == password`,
# `private_key "…";`, `api_key => "…"`): detect-secrets' keyword detector, its quotes-required patterns (the set it
# applies to text of no known file type), rewritten for RE2: a back-reference to the opening quote becomes one
# alternative per quote character. The reference's generic rule lets a value of letters only through, and a
# password can be letters only. Unlike detect-secrets' own search, every match is reported, not the first.
_KEYWORD_NAMES = (
    r"(?:api_?key|auth_?key|service_?key|account_?key|db_?key|database_?key|priv_?key|private_?key|client_?key|"
    r"db_?pass|database_?pass|key_?pass|password|passwd|pwd|secret|contraseña|contrasena)\w*"
)
_KEYWORD_VALUE = r"\w(?:[^\x0b'\"]*[^\x0b,'\"`])?"
_QUOTED = f"(?:\"({_KEYWORD_VALUE})\"|'({_KEYWORD_VALUE})'|`({_KEYWORD_VALUE})`)"
_CLOSING = r"(?:[\]'\"]{0,2})?"
KEYWORD_PATTERNS = (
    rf"(?i){_KEYWORD_NAMES}{_CLOSING}:\s*{_QUOTED}",  # api_key: "…"
    rf"{_QUOTED}\s*[!=]{{2,3}}\s*\w*{_KEYWORD_NAMES}",  # "…" == password (case-sensitive, as detect-secrets')
    rf"(?i){_KEYWORD_NAMES}{_CLOSING}\s*(?:={{1,3}}|!==?)\s*{_QUOTED}",  # password = "…", secret !== '…'
    rf"(?i){_KEYWORD_NAMES}[^\s]{{0,50}}?\s*{_QUOTED};",  # private_key "…";
    rf"(?i){_KEYWORD_NAMES}{_CLOSING}\s*=>?\s*{_QUOTED}",  # api_key => "…"
)
# The name a keyword match assigns to: the identifier its keyword is part of (`IAMUserChangePassword`, from the
# `Password` the pattern starts at), or, for `"…" == password`, the one that ends the match. Bytes past ASCII are
# taken as name characters (`contraseña`).
_NAME_HEAD = re.compile(rb"(?:[A-Za-z0-9_]|[\x80-\xff])*")
_NAME_BEFORE = re.compile(rb"[A-Za-z0-9_.-]*$")
_NAME_AT_END = re.compile(rb"(?:[A-Za-z0-9_.]|[\x80-\xff])*$")


def _keyword_value(data: bytes, spans: list[tuple[int, int]]) -> bytes:
    """The value of a keyword match when it is one (`field_classes.is_value`, the judgement every value after a
    password-like name gets: a placeholder, a reference, code, a route, a UI label's text are none)."""
    value = _first_group(data, spans)
    if not value:
        return b""
    start, stop = spans[0]
    if data[start : start + 1] in (b'"', b"'", b"`"):
        at_end = _NAME_AT_END.search(data, start, stop)
        name = at_end.group() if at_end else b""
    else:
        head = _NAME_HEAD.match(data, start, stop)
        before = _NAME_BEFORE.search(data, max(0, start - 64), start)
        name = (before.group() if before else b"") + (head.group() if head else b"")
    # The name only informs the judgement: a character cut at the window's edge is replaced, not an error.
    return value if field_classes.is_value(decode(value), name.decode("utf-8", "replace")) else b""


# detect-secrets' detectors used: only those for what the reference rule set (gitleaks') has no rule for, or finds
# only next to a provider's name: IBM Cloud IAM and COS HMAC keys, Softlayer, Cloudant, Azure storage account keys,
# Discord bot tokens, Square OAuth secrets, and bare Mailchimp keys, Telegram bot tokens and Twilio keys. The others
# are the reference's too, where each comes with the field's allowlists, entropy floors and labelled samples;
# detect-secrets alone is measured beside intake in tests/fixtures_review/test_gitleaks_corpus.py. Left out as
# before: the high-entropy string detectors (they flag UUIDs, digests, commit ids and base64 images, the controls
# that must stay clean) and the public-IP one. Their patterns run on RE2 (`_to_re2`).
DETECT_SECRETS_PLUGINS = (
    "AzureStorageKeyDetector",
    "CloudantDetector",
    "DiscordBotTokenDetector",
    "IbmCloudIamDetector",
    "IbmCosHmacDetector",
    "MailchimpDetector",
    "SoftlayerDetector",
    "SquareOAuthDetector",
    "TelegramBotTokenDetector",
    "TwilioKeyDetector",
)

# detect-secrets' format detectors that the reference rule set covers: not run by intake, measured beside it.
DETECT_SECRETS_COVERED_BY_THE_REFERENCE = (
    "ArtifactoryDetector",
    "AWSKeyDetector",
    "BasicAuthDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "JwtTokenDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PrivateKeyDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "StripeDetector",
)


# What every match of a rule holds (lower-case), so a text without it costs the rule one substring test.
# The labelled corpus tests every rule, so a hint that misses its own rule's matches fails there.
HINTS: dict[str, tuple[str, ...]] = {
    "azure-storage-key": ("accountkey=",),
    "mailchimp": ("-us",),
    "square-oauth": ("sq0csp-",),
    "twilio-key": ("ac", "sk"),
    "cloudant": ("cl",),
    "ibm-cloud-iam": ("key", "pwd", "pass", "token"),
    "ibm-cos-hmac": ("secret",),
    "softlayer": ("softlayer", "sl"),
    "keyword": ("key", "pass", "pwd", "secret", "contrase"),
    "n17q-harness-token": ("n17q_",),
    "bearer-token": ("bearer",),
    "url-userinfo": ("@",),
    "signed-url-param": ("sig", "x-amz-", "x-goog-"),
    "google-oauth-token": ("ya29.",),
    "aws-secret-access-key": ("aws",),
    "connection-string-password": ("password", "pwd"),
    "url-credential-param": ("=",),
}


def _slug(name: str) -> str:
    name = name.removesuffix("Detector")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower().replace("a-w-s", "aws")


_LOOKBEHIND_NOT_WORD = r"(?:(?<=\W)|(?<=^))"
# A group that ends in "not followed by one of these characters": `([a-f0-9]{48}(?![a-f0-9]))`.
_GROUP_THEN_NOT_FOLLOWED = re.compile(r"\(([^()]*)\(\?!\[([^\]]+)\]\)\)")


def _to_re2(regex: re.Pattern[str]) -> str:
    """A detect-secrets pattern as RE2 syntax: its flags inline, and the two look-arounds its detectors use, which
    RE2 lacks, as what they mean taken into the match (the value is a group of its own, so the group is the same):
    "not after a word character" as a non-word character or the start, "not followed by one of these" after a
    group as one other character or the end, outside the group. re2.error when something else is not RE2's."""
    pattern = regex.pattern.replace(_LOOKBEHIND_NOT_WORD, r"(?:^|\W)")
    pattern = _GROUP_THEN_NOT_FOLLOWED.sub(r"(\1)(?:[^\2]|$)", pattern)
    flags = ("i" if regex.flags & re.IGNORECASE else "") + ("m" if regex.flags & re.MULTILINE else "")
    return f"(?{flags}){pattern}" if flags else pattern


def _detect_secrets_plugins(names: tuple[str, ...]) -> dict[str, Any]:
    import detect_secrets.plugins as plugins_pkg
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    mapping: dict[str, Any] = get_mapping_from_secret_type_to_class()
    classes = {plugin_class.__name__: plugin_class for plugin_class in mapping.values()}
    missing = [name for name in names if name not in classes]
    if missing:  # pragma: no cover - a detector renamed upstream must be noticed, not skipped
        raise RuntimeError(f"detect-secrets has no {missing[0]} (installed from {plugins_pkg.__path__})")
    return {name: classes[name]() for name in names}


def _denylist_value(data: bytes, spans: list[tuple[int, int]]) -> bytes:
    """What to mask of a detect-secrets match. Its own analyze_string yields a regex's groups when it has any,
    which for some detectors is a prefix (`ghp`), not the secret: the last non-empty group is taken when it is at
    least 8 characters long (a password after `user:`, a key after its keyword), else the whole match without the
    delimiters some patterns take before and after the value (`"AKC…"`)."""
    groups = [data[a:b] for a, b in spans[1:] if b > a >= 0]
    if groups and len(groups[-1]) >= 8:
        return groups[-1]
    start, stop = spans[0]
    return data[start:stop].lstrip(b' \t\r\n"=:').rstrip(b' \t\r\n"')


def _detect_secrets_rules() -> tuple[Rule, ...]:
    """The detect-secrets detectors intake runs, on RE2."""
    plugins = _detect_secrets_plugins(DETECT_SECRETS_PLUGINS)
    return tuple(
        Rule(_slug(name), _re2_finder(tuple(_to_re2(r) for r in plugin.denylist), _denylist_value), "detect-secrets")
        for name, plugin in plugins.items()
    )


def _detect_secrets_as_published(names: tuple[str, ...]) -> tuple[Rule, ...]:
    """detect-secrets' detectors run by detect-secrets itself (Python's `re`, one match per keyword pattern), for
    the comparison: the library as a user of it would get it."""
    rules: list[Rule] = []
    for name, plugin in _detect_secrets_plugins(names).items():
        if name == "JwtTokenDetector":  # its analyze_string yields every eyJ… match; analyze_line keeps well-formed
            rules.append(Rule("jwt", _published_jwt(plugin), "detect-secrets"))
        else:
            rules.append(Rule(_slug(name), _published(plugin), "detect-secrets"))
    return tuple(rules)


def _published(plugin: Any) -> Callable[[bytes], Iterator[str]]:
    def find(data: bytes) -> Iterator[str]:
        text = decode(data)
        if not hasattr(plugin, "denylist"):
            yield from plugin.analyze_string(text)
            return
        for regex in plugin.denylist:
            for m in regex.finditer(text):
                groups = [g for g in m.groups() if g]
                value = (
                    groups[-1]
                    if groups and len(groups[-1]) >= 8
                    else m.group(0).lstrip(' \t\r\n"=:').rstrip(' \t\r\n"')
                )
                if value:
                    yield value

    return find


def _published_jwt(plugin: Any) -> Callable[[bytes], Iterator[str]]:
    def find(data: bytes) -> Iterator[str]:
        for value in plugin.analyze_string(decode(data)):
            if plugin.is_formally_valid(value):
                yield value

    return find


_RULES: tuple[Rule, ...] | None = None


def detect_secrets_alone() -> tuple[Rule, ...]:
    """Every detect-secrets format detector and its keyword detector, run by detect-secrets as published: the
    comparison."""
    names = DETECT_SECRETS_PLUGINS + DETECT_SECRETS_COVERED_BY_THE_REFERENCE + ("KeywordDetector",)
    return tuple(
        Rule(r.name, r.find_bytes, r.source, HINTS.get(r.name, ())) for r in _detect_secrets_as_published(names)
    )


def nosey_parker() -> tuple[Rule, ...]:
    """The second reference rule set, Nosey Parker's (`reference.nosey_parker`): each rule gated by its own pattern
    in the prefilter's pass, and, where the prefilter cannot answer, by the literals its pattern requires (none: it
    runs on every text)."""
    np_rules = nosey_parker_rules()
    if np_rules.not_compiled:  # pragma: no cover - a refreshed rule RE2 cannot run must be noticed, not skipped
        raise RuntimeError(f"Nosey Parker rules not compiled: {np_rules.not_compiled}")
    return tuple(Rule(r.slug, r.find_bytes, "noseyparker", r.literals, r.re2_pattern) for r in np_rules.rules)


def rules() -> tuple[Rule, ...]:
    """The rules intake runs besides gitleaks': Nosey Parker's (the second reference, first so that a value both
    name is named by a reference rule), detect-secrets' (on RE2), the keyword rule, the project's, and the field
    classes (`field_classes`: kinds of credential no single rule set covers), last, so a value a provider's rule
    knows is named by that rule."""
    global _RULES
    if _RULES is None:
        keyword = Rule("keyword", _re2_finder(KEYWORD_PATTERNS, _keyword_value, context=64), "detect-secrets")
        own = tuple(Rule(name, find, "n17q") for name, find in N17Q_RULES)
        classes = tuple(Rule(name, find, "n17q", hints) for name, find, hints in field_classes.field_class_rules())
        found = (*_detect_secrets_rules(), keyword, *own)
        _RULES = (
            *nosey_parker(),
            *(Rule(r.name, r.find_bytes, r.source, HINTS.get(r.name, ())) for r in found),
            *classes,
        )
    return _RULES


# Prefixes that name a credential's kind, not its value: a preview may show them.
_PUBLIC_PREFIXES = (
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxs-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "sk-ant-",
    "sk-proj-",
    "AKIA",
    "ASIA",
    "AIza",
    "ya29.",
    "hf_",
    "npm_",
    "pypi-",
    "SG.",
    "eyJ",
    "n17q_",
    "-----BEGIN",
)
_SHORTEST_REFERENCE_SECRET = 8
_MIN_SECRET = 6  # shorter matches (a keyword rule's `pass = "x"`) are not masked as secrets


def preview(value: str) -> str:
    """A masked preview: the credential's public prefix, if any, and its length; never the value."""
    prefix = next((p for p in _PUBLIC_PREFIXES if value.startswith(p)), "")
    return f"{prefix}•••• ({len(value)} chars)"


def mask_token(rule: str) -> str:
    return f"[masked:{rule}]"


def scan_text(text: str) -> list[tuple[str, str]]:
    """(rule, value) for every secret found in `text`; one value reported once, by the first rule naming it.

    The reference rule set (gitleaks') runs first, each rule only on a text holding one of its keywords; then our
    own and detect-secrets' rules for what the reference lacks, each only on a text holding one of its hints. All
    of them on RE2, over the same UTF-8 bytes; which keywords and hints a text holds is found in one pass
    (`Prefilter`).
    """
    data = utf8(text)
    found: dict[str, str] = {}
    _scan_into(found, text, data, _prefilter().matches(data))
    return [(rule, value) for value, rule in found.items()]


def scan_lines(text: str, *, piece_chars: int = 1024) -> list[tuple[str, str]]:
    """`scan_text` for a text whose lines are independent records (a run's events, one JSON object a line): what a
    scan of each line alone would find, with far fewer passes. The text is cut into pieces of about `piece_chars`
    (whole lines), the prefilter says which keywords and hints each piece holds, and the pieces holding the same
    ones are scanned together, so a rule whose keyword sits in one line of a thousand reads that line's piece, not
    the thousand. A value across two lines is not reported (it belongs to neither record)."""
    groups: dict[frozenset[str] | None, list[str]] = {}
    prefilter = _prefilter()
    start, end = 0, len(text)
    while start < end:
        stop = text.find("\n", start + piece_chars)
        stop = end if stop == -1 else stop
        piece = text[start:stop]
        groups.setdefault(prefilter.matches(utf8(piece)), []).append(piece)
        start = stop + 1
    found: dict[str, str] = {}
    for present, pieces in groups.items():
        joined = "\n".join(pieces)
        _scan_into(found, joined, utf8(joined), present)
    return [(rule, value) for value, rule in found.items() if "\n" not in value]


def _scan_into(found: dict[str, str], text: str, data: bytes, present: frozenset[str] | None) -> None:
    lowered = text.lower() if present is None else ""
    for hit in reference_rules().find(text, lowered or None, data, present=present):
        # A rule whose first group is a fragment of the token's structure (a repeated `[a-z0-9]{4}-` of a webhook
        # path) names a few characters as the secret: then the whole match is what to mask.
        value = hit.secret if len(hit.secret) >= _SHORTEST_REFERENCE_SECRET else hit.match
        if len(value) >= _MIN_SECRET and value not in found and not _is_placeholder(value, by_entropy=False):
            found[value] = hit.rule
    own = _rules_holding(present) if present is not None else _rules_in(lowered)
    for rule in own:
        for value in rule.find_bytes(data):
            if len(value) >= _MIN_SECRET and value not in found and not _is_placeholder(value):
                found[value] = rule.name


_RULES_HOLDING: dict[frozenset[str], tuple[Rule, ...]] = {}


def _rules_holding(present: frozenset[str]) -> tuple[Rule, ...]:
    """Our rules that can find something in a text holding exactly the literals and gates `present` (the
    prefilter's answer), in `rules()` order: a gated rule whose gate matched, a rule with hints one of which the
    text holds, and every rule with neither. Texts hold few distinct sets of literals, so each set's answer is
    kept: the names of the rules' own literals and gates, never anything of a scanned text's values. Bounded: past
    4,096 sets, the answers are dropped and worked out again."""
    chosen = _RULES_HOLDING.get(present)
    if chosen is None:
        chosen = tuple(
            rule
            for rule in rules()
            if (
                Prefilter.GATE + rule.name in present
                if rule.gate
                else not rule.hints or not present.isdisjoint(rule.hints)
            )
        )
        if len(_RULES_HOLDING) >= 4096:
            _RULES_HOLDING.clear()
        _RULES_HOLDING[present] = chosen
    return chosen


def _rules_in(lowered: str) -> list[Rule]:
    """`_rules_holding` for a text the prefilter could not read: the hints looked for in its lower case (a gated
    rule's hints are the literals its pattern requires)."""
    return [rule for rule in rules() if not rule.hints or any(h in lowered for h in rule.hints)]


class Prefilter:
    """Which of the reference's keywords and our rules' hints a text holds, in one pass of RE2's set matcher (a DFA
    over every literal at once, case-insensitive), an order of magnitude faster than a pass of the Aho-Corasick
    automaton over the lower-cased text. In the same pass, which rules' `gate` patterns (Nosey Parker's whole
    patterns) match anywhere in it: a rule whose gate does not match cannot find anything, and most texts match
    none, so one pass of the set replaces a pass of each of those rules (tens of them on a body holding `token`).

    RE2's set matcher reports nothing when its DFA runs out of memory, which would read as "no keyword here": a
    sentinel appended to every text must be found, or `present` answers None and the caller falls back to the
    automaton and the hints. Fail closed, never a silent miss."""

    _SENTINEL = b"\x00n17q-prefilter-sentinel\x00"
    GATE = "\x00gate:"  # what a gate's name is prefixed with in `present`'s answer: never a literal's text

    def __init__(self, literals: list[str], gates: dict[str, str] | None = None) -> None:
        options = re2.Options()
        options.max_mem = 256 << 20  # the gates' DFA is larger than the literals'; past this, the fallback
        self._set = re2.Set.SearchSet(options)
        self._literals = sorted(set(literals))
        self._names = list(self._literals)
        for literal in self._literals:
            self._set.Add(b"(?i)" + re.escape(literal).encode("utf-8"))
        for name, pattern in (gates or {}).items():
            self._set.Add(pattern.encode("utf-8"))
            self._names.append(self.GATE + name)
        self._sentinel = self._set.Add(re.escape(self._SENTINEL.decode("ascii")).encode("ascii"))
        self._set.Compile()

    def matches(self, data: bytes) -> frozenset[str] | None:
        """The literals `data` holds and `GATE + name` for each gate that matches in it; None when RE2 could not
        tell."""
        matched = self._set.Match(data + self._SENTINEL)
        if self._sentinel not in matched:
            return None
        return frozenset(self._names[i] for i in matched if i != self._sentinel)

    def present(self, data: bytes) -> frozenset[str] | None:
        """The literals `data` holds (None when RE2 could not tell)."""
        found = self.matches(data)
        return None if found is None else frozenset(f for f in found if not f.startswith(self.GATE))


_PREFILTER: Prefilter | None = None


def _prefilter() -> Prefilter:
    global _PREFILTER
    if _PREFILTER is None:
        literals = list(reference_rules().keywords) + [h for rule in rules() for h in rule.hints]
        _PREFILTER = Prefilter(literals, {rule.name: rule.gate for rule in rules() if rule.gate})
    return _PREFILTER


# "redacted": the word the product itself writes where a value was taken out (vocabulary.ABSENCE_KINDS, a fixture's
# `absent` map), which the storage gate reads again whenever a row holding it is saved (issue 32).
_PLACEHOLDER = re.compile(
    r"^(?:\[redacted\]|(?i:redacted)|\[masked:[a-z0-9-]+\]|\*+|x+|X+|<[^>]*>|\$\{[^}]*\}|\{\{[^}]*\}\})$"
)


def _is_placeholder(value: str, *, by_entropy: bool = True) -> bool:
    # For our own, Nosey Parker's (which has no entropy floor or allowlist of its own: `ghp_xxxx…` is a match) and
    # detect-secrets' rules, also a value that is one character repeated after a short prefix
    # (`AIzaaaaa…`, `rdme_XXXX…`, `glc_1111…`): a documentation placeholder, far below the entropy of any
    # credential (a random 16 letters: about 3.8 bits). The reference's rules carry entropy floors of their own.
    return bool(_PLACEHOLDER.match(value)) or (by_entropy and len(value) >= 8 and shannon_entropy(value) < 1.5)


def mask_text(text: str, where: str, findings: list[dict[str, str]], *, depth: int = 0) -> str:
    """`text` with every secret found replaced by `[masked:<rule>]`; then text stored as UTF-16 inside it
    (`_mask_utf16`) and every base64 (or gzip+base64) run in it, decoded (`_mask_encoded`)."""
    hits = scan_text(text)
    if hits:
        text = _mask_values(text, {value: rule for rule, value in hits}, where, findings)
    return _mask_encoded(_mask_utf16(text, where, findings), where, findings, depth)


_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_TOKEN_RUN_FROM = re.compile(r"[A-Za-z0-9_-]*")


def _token_end(text: str, end: int) -> int:
    """Where the run of token characters that reaches `end` ends."""
    m = _TOKEN_RUN_FROM.match(text, end)
    return m.end() if m else end


def _mask_values(
    text: str,
    values: dict[str, str],
    where: str,
    findings: list[dict[str, str]],
    *,
    replace: Callable[[str, str], str] | None = None,
    whole_tokens: bool = True,
) -> str:
    """Every occurrence of every value (`{value: rule}`) in `text` replaced, in one pass: by `[masked:<rule>]`, or
    by what `replace(rule, span)` gives. With `whole_tokens`, a span is widened to the whole token it sits in (a
    pattern that stops short of a token's end, a Slack token's later segments, must not leave the rest in clear).
    One finding per value that occurs, longest first, at `where`."""
    automaton = ahocorasick.Automaton()
    for value, rule in values.items():
        if value:
            automaton.add_word(value, (len(value), rule, value))
    if not len(automaton):
        return text
    automaton.make_automaton()
    spans = sorted(
        ((last - n + 1, last + 1, rule, value) for last, (n, rule, value) in automaton.iter(text)),
        key=lambda s: (s[0], s[0] - s[1]),
    )
    if not spans:
        return text
    present: dict[str, str] = {}
    merged: list[list[Any]] = []  # [start, end, rule]
    for start, end, rule, value in spans:
        present.setdefault(value, rule)
        floor = merged[-1][1] if merged else 0
        if whole_tokens:
            while start > floor and text[start - 1] in _TOKEN_CHARS:
                start -= 1
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1][1] = _token_end(text, end) if whole_tokens else end
            continue
        merged.append([start, _token_end(text, end) if whole_tokens else end, rule])
    for value, rule in sorted(present.items(), key=lambda item: -len(item[0])):
        findings.append({"rule": rule, "path": where, "preview": preview(value)})
    out: list[str] = []
    last = 0
    for start, end, rule in merged:
        out += [text[last:start], replace(rule, text[start:end]) if replace else mask_token(rule)]
        last = end
    out.append(text[last:])
    return "".join(out)


# Encoded forms inside a text: a run of base64 (standard or URL-safe) long enough to hold a credential is decoded
# (and gunzipped when it is gzip), and if what comes out is text it is scanned like any text, down to
# MAX_DECODE_DEPTH levels (base64 of a JSON document holding base64, a body encoded twice). A secret found inside
# masks the whole encoded run: a piece of base64 cannot be masked in place. The decoded runs of a text are scanned
# together, as one text (a separator between them that no value crosses), so ten thousand runs cost one scan.
MAX_DECODE_DEPTH = 3
_MAX_DECODED_BYTES = 4 * 1024 * 1024
_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
# The same runs found by RE2 in a long text: linear time, ten times faster there (Python's engine starts again at
# every character of a word shorter than a run); on a short one its setup costs more than it saves. RE2 reads UTF-8:
# a text holding a lone surrogate (JSON can carry one) is read by `re`. tests/fixtures_review/test_scanning.py holds
# both equal.
_B64_RUN_RE2 = re2.compile(_B64_RUN.pattern)
# An ASCII text is matched as bytes: its byte offsets are its character offsets, and RE2's Python wrapper converts none
# (three times faster on a body of many runs: ids, digests, URLs).
_B64_RUN_RE2_BYTES = re2.compile(_B64_RUN.pattern.encode("ascii"))
_RE2_FROM_CHARS = 4096
_RUN_SEPARATOR = "\n\x00\n"
_MASKED = re.compile(r"\[masked:([a-z0-9-]+)\]")


def _mask_encoded(text: str, where: str, findings: list[dict[str, str]], depth: int) -> str:
    if depth >= MAX_DECODE_DEPTH or len(text) < 24:
        return text
    spans = _encoded_runs_holding_secrets(text, where, findings, depth)
    if not spans:
        return text
    parts: list[str] = []
    last = 0
    for start, end, rule in spans:
        parts += [text[last:start], mask_token(rule)]
        last = end
    return "".join([*parts, text[last:]])


def _encoded_runs_holding_secrets(
    text: str, where: str, findings: list[dict[str, str]], depth: int
) -> list[tuple[int, int, str]]:
    """(start, end, rule) of each base64 run of `text` whose decoded text holds a secret; the findings inside are
    added to `findings` at `<where>(decoded)`."""
    runs = list(_decoded_runs(text))
    if not runs:
        return []
    inner: list[dict[str, str]] = []
    joined = _RUN_SEPARATOR.join(decoded for _start, _end, decoded in runs)
    masked = mask_text(joined, f"{where}(decoded)", inner, depth=depth + 1)
    if not inner:
        return []
    findings.extend(inner)
    pieces: list[str | None] = list(masked.split(_RUN_SEPARATOR))
    if len(pieces) != len(runs):  # a value that crossed a separator: every run is masked
        pieces = [None] * len(runs)
    out = []
    for (start, end, decoded), piece in zip(runs, pieces, strict=True):
        if piece is None or piece != decoded:
            named = _MASKED.search(piece or "")
            out.append((start, end, named.group(1) if named else inner[0]["rule"]))
    return out


def _mask_utf16(text: str, where: str, findings: list[dict[str, str]]) -> str:
    """Text that is UTF-16 read as UTF-8 (a NUL after every ASCII character): scanned without the NULs, each
    secret masked in its interleaved form."""
    if text.count("\x00") < 12:
        return text
    spread = {"\x00".join(value): rule for rule, value in scan_text(text.replace("\x00", ""))}
    if not spread:
        return text
    unspread: list[dict[str, str]] = []
    masked = _mask_values(
        text, spread, where, unspread, replace=lambda rule, _span: "\x00".join(mask_token(rule)), whole_tokens=False
    )
    findings.extend({**f, "preview": _unspread_preview(f["preview"])} for f in unspread)
    return masked


def _unspread_preview(spread_preview: str) -> str:
    # The preview of an interleaved value counts its NULs: give the value's own length.
    m = re.search(r"\((\d+) chars\)$", spread_preview)
    return spread_preview if m is None else spread_preview[: m.start()] + f"({(int(m.group(1)) + 1) // 2} chars)"


def _encoded_secret(text: str, depth: int = 0) -> bool:
    """Whether a base64 run in `text` decodes to text in which a secret is found (at any decoding depth)."""
    if depth >= MAX_DECODE_DEPTH:
        return False
    runs = [decoded for _start, _end, decoded in _decoded_runs(text)]
    if not runs:
        return False
    joined = _RUN_SEPARATOR.join(runs)
    return bool(scan_text(joined)) or _encoded_secret(joined, depth + 1)


def _decoded_runs(text: str) -> Iterator[tuple[int, int, str]]:
    """Each base64 run of `text` that decodes to text: its start, its end, and that text."""
    for start, end in _b64_runs(text):
        run = text[start:end]
        if run.islower() or run.isupper():  # the common case (ids, digests), checked before any call
            continue
        decoded = decode_text(run)
        if decoded is not None:
            yield start, end, decoded


def _b64_runs(text: str) -> Iterable[tuple[int, int]]:
    """The (start, end) character offsets of each base64 run of `text`."""
    if len(text) >= _RE2_FROM_CHARS:
        if text.isascii():
            return [m.span() for m in _B64_RUN_RE2_BYTES.finditer(text.encode("ascii"))]
        try:
            return [m.span() for m in _B64_RUN_RE2.finditer(text)]
        except UnicodeEncodeError:
            pass
    return [m.span() for m in _B64_RUN.finditer(text)]


def decode_text(run: str) -> str | None:
    """The text a base64 run encodes (gunzipped when gzip; UTF-8, or UTF-16 with a BOM or a zero byte every other
    byte), or None when it does not decode to printable text.

    A run in one letter case only (hex digests, UUIDs, paths, upper-case ids) is not looked at: base64 of text
    of this length mixes both cases, and most long runs in a body are such ids.
    """
    if run.islower() or run.isupper() or len(run) % 4 == 1:
        return None
    try:
        urlsafe = "-" in run or "_" in run
        raw = base64.b64decode(run + "=" * (-len(run) % 4), altchars=b"-_" if urlsafe else None, validate=True)
    except (binascii.Error, ValueError):
        return None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, _MAX_DECODED_BYTES)
        except zlib.error:
            return None
    return _printable_text(raw)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _printable_text(raw: bytes) -> str | None:
    text = None
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(raw) >= 8 and raw[1::2].count(0) > len(raw) // 3):
        try:
            text = raw.decode("utf-16")
        except UnicodeDecodeError:
            text = None
    if text is None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not text:
        return None
    # Control characters other than tab and line ends count against it (one pass in C, not one call a character).
    return text if len(_CONTROL.findall(text)) <= 0.05 * len(text) else None


def mask_json(value: Any, where: str, findings: list[dict[str, str]], *, known: dict[str, str] | None = None) -> Any:
    """`value` with every secret found masked, leaf by leaf, each finding at its leaf's path.

    A container is scanned once as the text of all its strings (keys and values, one per line: one pass of every
    rule over the body, not one per string); only when that finds something are the leaves that hold a found
    value rescanned and masked. `known` (`{value: rule}`) are values a scan of a larger text found (a run's
    events scanned together): masked wherever they occur, as if this scan had found them.
    """
    if isinstance(value, str):
        masked = mask_text(value, where, findings)
        left = {found: rule for found, rule in (known or {}).items() if found in masked}
        return _mask_values(masked, left, where, findings) if left else masked
    if not isinstance(value, dict | list):
        return value
    strings, keys = strings_and_keys(value)
    named = frozenset(k for k in keys if isinstance(k, str) and field_classes.is_secret_field(k))
    if not named and not keys.isdisjoint(field_classes.PAIR_VALUE_KEYS):
        # Name/value pair objects (`{"name": "DB_PASSWORD", "value": …}`) may be here: the walk judges each.
        named = _PAIRS_POSSIBLE
    joined = "\n".join(strings)
    hits = scan_text(joined) + [(rule, found) for found, rule in (known or {}).items() if found in joined]
    if _encoded_secret(joined):  # base64 holding a secret somewhere: every leaf goes through mask_text
        known_hits = {found: rule for rule, found in hits}
        return _mask_leaves(value, where, findings, None, known_hits, named)
    if not hits:
        # A value under a secret-named key is masked whatever it looks like (`field_classes.is_secret_field`);
        # the other leaves are left as they are.
        return _mask_leaves(value, where, findings, _NO_VALUES, {}, named) if named else value
    # The leaves to rescan are those holding a found value (as found in the JSON text, or unescaped); a value
    # that spans leaves (a keyword rule across `"key": "value"`) sends every leaf to the rescan.
    values: dict[str, str] = {}
    for rule, found in hits:
        values.setdefault(found, rule)
        if "\\" in found:
            try:
                values.setdefault(json.loads(f'"{found}"'), rule)
            except ValueError:
                return _mask_leaves(value, where, findings, None, {}, named)
    holder = ahocorasick.Automaton()
    for found in values:
        holder.add_word(found, found)
    holder.make_automaton()
    return _mask_leaves(value, where, findings, holder, values, named)


def strings_and_keys(value: Any) -> tuple[list[str], set[Any]]:
    """Every string of `value` (keys and values), and the distinct keys (a body repeats a schema's few names: each
    is judged once, `field_classes.is_secret_field`)."""
    out: list[str] = []
    keys: set[Any] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, dict):
            out.extend(node)
            keys.update(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out, keys


# `_mask_leaves`' holder when no value was found by a scan: only secret-named leaves change.
_NO_VALUES = object()
# `named` when no key is secret-named but a name/value pair object may hold a secret-named field.
_PAIRS_POSSIBLE = frozenset({"\x00pairs"})


def _mask_leaves(
    value: Any,
    where: str,
    findings: list[dict[str, str]],
    holder: Any | None,
    known: dict[str, str],
    named: frozenset[str] = frozenset(),
) -> Any:
    """`value` with its leaves masked (`_mask_leaf`), and every string under a key in `named` (secret-named) that
    is a value (`field_classes.is_value`) replaced whole."""
    if isinstance(value, str):
        return _mask_leaf(value, where, findings, holder, known)
    if isinstance(value, dict):
        out = {}
        pair = field_classes.secret_pair_name(value)  # `{"name": "DB_PASSWORD", "value": …}`: a field too
        for key, child in value.items():
            if pair is not None and key in field_classes.PAIR_VALUE_KEYS:
                secret = field_classes.pair_secret(child, pair)
                if secret is not None:
                    findings.append({"rule": "secret-named-pair", "path": join(where, key), "preview": preview(secret)})
                    masked = mask_token("secret-named-pair")
                    out[key] = {**child, "stringValue": masked} if isinstance(child, dict) else masked
                    continue
            masked_key = key
            if len(key) >= _MIN_SECRET:
                # A secret that is a key: masked, and the path every finding names is the masked one (the
                # finding's path is shown on the review page and in the API; it must not carry the secret).
                key_findings: list[dict[str, str]] = []
                masked_key = _mask_leaf(key, where, key_findings, holder, known)
                for finding in key_findings:
                    finding["path"] = join(where, masked_key)
                findings.extend(key_findings)
            path = join(where, masked_key)
            if key in named and isinstance(child, str) and field_classes.is_value(child, key):
                findings.append({"rule": "secret-named-value", "path": path, "preview": preview(child)})
                out[masked_key] = mask_token("secret-named-value")
                continue
            out[masked_key] = _mask_leaves(child, path, findings, holder, known, named)
        return out
    if isinstance(value, list):
        return [_mask_leaves(child, join(where, i), findings, holder, known, named) for i, child in enumerate(value)]
    return value


def _mask_leaf(text: str, where: str, findings: list[dict[str, str]], holder: Any | None, known: dict[str, str]) -> str:
    if holder is _NO_VALUES or (holder is not None and next(holder.iter(text), None) is None):
        return text
    text = mask_text(text, where, findings)
    # A value found only in the JSON text's context (a keyword rule reading `"name": "value"`) is masked here
    # even though the leaf alone no longer shows a rule why.
    left = {found: rule for found, rule in known.items() if found in text}
    return _mask_values(text, left, where, findings) if left else text


_PRINTABLE_RUN = re.compile(r"[\x20-\x7e]{12,}")
_UTF16LE_RUN = re.compile(r"(?:[\x20-\x7e]\x00){12,}")
_BINARY_SEPARATOR = "\x00"


def _values_in_texts(joined: str, where: str, findings: list[dict[str, str]]) -> dict[str, str]:
    """{value: rule} of every secret in the texts (`joined`: one per line), each value widened to the whole token it
    sits in within its own text, and each base64 run that decodes to a secret, whole."""
    out: dict[str, str] = {}
    for rule, value in scan_text(joined):
        at = joined.find(value)
        while at != -1:
            start, end = at, _token_end(joined, at + len(value))
            while start > 0 and joined[start - 1] in _TOKEN_CHARS:
                start -= 1
            out.setdefault(joined[start:end], rule)
            at = joined.find(value, at + 1)
    for start, end, rule in _encoded_runs_holding_secrets(joined, where, findings, 1):
        out.setdefault(joined[start:end], rule)
    return out


def mask_binary(
    raw: bytes,
    where: str,
    findings: list[dict[str, str]],
    *,
    strings: list[str] | None = None,
    printable_runs: bool = True,
    named: dict[str, str] | None = None,
) -> bytes:
    """Secrets in a binary body, found in its printable runs (ASCII, and UTF-16 as Windows writes it), overwritten
    with `*` byte for byte. The runs are scanned together as one text (one scan, however many runs), and every
    occurrence of a value found is overwritten in one pass; a base64 run that decodes to something secret (a body
    encoded twice) is overwritten whole.

    A structured binary (protobuf) whose caller can read its texts passes them as `strings`: each is scanned as the
    whole text it is (in the raw bytes a value sits between framing bytes that may be letters, which a rule's
    boundaries refuse), a value found is widened to its whole token inside its own text, and then overwritten
    exactly where it occurs in the raw bytes, never past it: the framing around it stays, so the body still parses
    and every byte range into it still holds what it held. `printable_runs=False` when `strings` are all its texts
    (the caller checked that the body holds nothing its schema does not know). `named`: {value: rule} of values the
    caller found by the name they are given (`field_classes.secret_pair_values`), overwritten the same way."""
    text = raw.decode("latin-1")  # one character a byte: offsets are the bytes'
    needles: dict[str, str] = {}
    ascii_runs = _PRINTABLE_RUN.findall(text) if printable_runs or strings is None else []
    if ascii_runs:
        joined = _BINARY_SEPARATOR.join(ascii_runs)
        for rule, value in scan_text(joined):
            for piece in value.split(_BINARY_SEPARATOR):  # a value across runs: each piece of it
                if len(piece) >= 4:
                    needles.setdefault(piece, rule)
        for start, end, rule in _encoded_runs_holding_secrets(joined, where, findings, 1):
            needles.setdefault(joined[start:end], rule)
    texts = "\n".join(strings) if strings else ""
    if texts:
        for value, rule in _values_in_texts(texts, where, findings).items():
            needles.setdefault(value.encode("utf-8").decode("latin-1"), rule)
    for value, rule in (named or {}).items():  # last: a value a provider's rule knows is named by that rule
        if len(value) >= _MIN_SECRET:
            needles.setdefault(value.encode("utf-8").decode("latin-1"), rule)
    masked = (
        _mask_values(
            text,
            needles,
            where,
            findings,
            replace=lambda _rule, span: "*" * len(span),
            whole_tokens=strings is None,
        )
        if needles
        else text
    )
    # UTF-16 text, where it can be: anywhere in a body read as printable runs; only inside the texts of a body whose
    # texts are all known (the rest is framing, ids and numbers, which hold no run of 12 characters), and not at
    # all when they hold no NUL (a UTF-16 run has one after every character).
    wide_source = masked if strings is None or printable_runs else texts
    wide_runs = (
        [m.group().encode("latin-1").decode("utf-16-le") for m in _UTF16LE_RUN.finditer(wide_source)]
        if "\x00" in wide_source
        else []
    )
    if wide_runs:
        wide: dict[str, str] = {}
        for rule, value in scan_text(_BINARY_SEPARATOR.join(wide_runs)):
            for piece in value.split(_BINARY_SEPARATOR):
                if len(piece) >= 4:
                    wide.setdefault(piece.encode("utf-16-le").decode("latin-1"), rule)
        if wide:
            wide_findings: list[dict[str, str]] = []
            masked = _mask_values(
                masked,
                wide,
                where,
                wide_findings,
                replace=lambda _rule, span: "*\x00" * (len(span) // 2),
                whole_tokens=False,
            )
            findings.extend({**f, "preview": _unspread_preview(f["preview"])} for f in wide_findings)
    return masked.encode("latin-1")
