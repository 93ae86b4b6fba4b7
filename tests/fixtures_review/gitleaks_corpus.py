"""gitleaks' labelled rule corpus, built from gitleaks' own rule sources (vendored in tests/data/gitleaks-rules/).

Each rule function of gitleaks' generator ends in `utils.Validate(r, tps, fps)`: its true positives and its false
positives, written as Go expressions that mix literals with `secrets.NewSecret(<regex>)` (a random string the
regex matches) and `utils.GenerateSampleSecrets(id, secret)` (the secret in ~30 syntaxes of config files and
languages). Go is not on this machine, so this module evaluates that small subset of Go: string literals,
`+`, `[]string{…}`, `append(…)`, local variables, `fmt.Sprintf`, the `utils` pattern helpers and the two
generators above (their templates are read from the vendored `generate.go`). Random strings come from a generator
seeded by the rule id, so the corpus is the same on every run. A rule whose expressions use anything else is
reported in `Corpus.skipped` with the reason, never silently left out.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from re import _parser as sre_parse
from typing import Any

RULES_DIR = Path(__file__).resolve().parents[1] / "data" / "gitleaks-rules"

# --- a tokenizer and an expression evaluator for the Go the rule files use --------------------------------------

_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r]+)|(?P<comment>//[^\n]*|/\*[\s\S]*?\*/)|(?P<nl>\n)
    |(?P<raw>`[^`]*`)|(?P<str>"(?:\\.|[^"\\\n])*")|(?P<chr>'(?:\\.|[^'\\])*')
    |(?P<num>\d+(?:\.\d+)?)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>\.\.\.|:=|\+=|==|!=|&&|\|\||[-+*/%(){}\[\],.;:=<>!&|^*])""",
    re.X,
)


class Unsupported(Exception):
    pass


def _go_string(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1].replace("\r", "")
    body = token[1:-1]
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        n = body[i + 1]
        simple = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "a": "\a", "b": "\b", "f": "\f"}
        if n in simple:
            out.append(simple[n])
            i += 2
        elif n == "v":
            out.append("\v")
            i += 2
        elif n == "x":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif n == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif n == "U":
            out.append(chr(int(body[i + 2 : i + 10], 16)))
            i += 10
        elif n in "01234567":
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            raise Unsupported(f"string escape \\{n}")
    return "".join(out)


def tokenize(source: str) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:
            raise Unsupported(f"cannot read {source[pos : pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind in ("ws", "comment"):
            if kind == "comment" and "\n" in m.group():
                tokens.append(("nl", "\n"))
            continue
        tokens.append((kind, m.group()))
    return tokens


class Evaluator:
    def __init__(self, tokens: list[tuple[str, str]], env: dict[str, Any], rng: random.Random, templates: list[str]):
        self.t = tokens
        self.i = 0
        self.env = env
        self.rng = rng
        self.templates = templates

    # token helpers
    def peek(self, skip_nl: bool = True) -> tuple[str, str]:
        j = self.i
        while skip_nl and j < len(self.t) and self.t[j][0] == "nl":
            j += 1
        return self.t[j] if j < len(self.t) else ("eof", "")

    def take(self, skip_nl: bool = True) -> tuple[str, str]:
        while skip_nl and self.i < len(self.t) and self.t[self.i][0] == "nl":
            self.i += 1
        tok = self.t[self.i] if self.i < len(self.t) else ("eof", "")
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        tok = self.take()
        if tok[1] != value:
            raise Unsupported(f"expected {value!r}, got {tok[1]!r}")

    # expressions: sum := primary ('+' primary)*
    def expr(self) -> Any:
        value = self.primary()
        while self.peek(skip_nl=False)[1] == "+":
            self.take()
            right = self.primary()
            if not (isinstance(value, str) and isinstance(right, str)):
                raise Unsupported("+ of non-strings")
            value = value + right
        return value

    def primary(self) -> Any:
        kind, text = self.take()
        if kind in ("str", "raw"):
            value: Any = _go_string(text)
        elif kind == "num":
            value = int(text) if text.isdigit() else float(text)
        elif text == "[":
            self.expect("]")
            elem = self.take()[1]
            if elem != "string":
                raise Unsupported(f"[]{elem}")
            value = self.composite()
        elif text == "(":
            value = self.expr()
            self.expect(")")
        elif kind == "ident":
            value = self.name(text)
        else:
            raise Unsupported(f"unexpected {text!r}")
        while self.peek(skip_nl=False)[1] == "[":  # indexing a list or slicing a string
            self.take()
            index = self.expr()
            self.expect("]")
            value = value[index]
        return value

    def composite(self) -> list[str]:
        self.expect("{")
        items: list[str] = []
        while self.peek()[1] != "}":
            item = self.expr()
            if not isinstance(item, str):
                raise Unsupported("non-string list item")
            items.append(item)
            if self.peek()[1] == ",":
                self.take()
        self.expect("}")
        return items

    def args(self) -> list[Any]:
        self.expect("(")
        out: list[Any] = []
        while self.peek()[1] != ")":
            value = self.expr()
            if self.peek()[1] == "...":
                self.take()
                out.extend(value)
            else:
                out.append(value)
            if self.peek()[1] == ",":
                self.take()
        self.expect(")")
        return out

    def name(self, first: str) -> Any:
        dotted = first
        while self.peek(skip_nl=False)[1] == ".":
            self.take()
            dotted += "." + self.take()[1]
        if self.peek(skip_nl=False)[1] == "(":
            return self.call(dotted, self.args())
        if dotted in self.env:
            return self.env[dotted]
        raise Unsupported(f"unknown name {dotted}")

    def call(self, fn: str, args: list[Any]) -> Any:
        if fn == "append":
            return [*args[0], *args[1:]]
        if fn == "secrets.NewSecret":
            return generate(args[0], self.rng)
        if fn == "utils.GenerateSampleSecrets":
            return [_fill(t, args[0], args[1]) for t in self.templates]
        if fn == "utils.GenerateSampleSecret":
            return f'{args[0]}_api_token = "{args[1]}"'
        if fn in PATTERNS:
            return PATTERNS[fn](*args)
        if fn == "fmt.Sprintf":
            return _sprintf(args[0], args[1:])
        if fn == "strings.Repeat":
            return args[0] * args[1]
        if fn in ("strings.ToUpper", "strings.ToLower"):
            return args[0].upper() if fn.endswith("Upper") else args[0].lower()
        raise Unsupported(f"call {fn}")


PATTERNS: dict[str, Callable[..., str]] = {
    "utils.Numeric": lambda n: f"[0-9]{{{n}}}",
    "utils.Hex": lambda n: f"[a-f0-9]{{{n}}}",
    "utils.AlphaNumeric": lambda n: f"[a-z0-9]{{{n}}}",
    "utils.AlphaNumericExtendedShort": lambda n: f"[a-z0-9_-]{{{n}}}",
    "utils.AlphaNumericExtended": lambda n: f"[a-z0-9=_\\-]{{{n}}}",
    "utils.AlphaNumericExtendedLong": lambda n: f"[a-z0-9\\/=_\\+\\-]{{{n}}}",
    "utils.Hex8_4_4_4_12": lambda: "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
}


def _sprintf(fmt: str, args: list[Any]) -> str:
    values = iter(args)

    def one(m: re.Match[str]) -> str:
        if m.group() == "%%":
            return "%"
        value = next(values)
        return f'"{value}"' if m.group().endswith("q") else str(value)

    return re.sub(r"%%|%[-+ #0]*\d*[sdvq]", one, fmt)


def _fill(template: str, identifier: str, secret: str) -> str:
    return template.replace("{i}", identifier).replace("{I}", identifier.upper()).replace("{s}", secret)


# --- random strings a regex matches (what reggen does for secrets.NewSecret) ----------------------------------------

_PRINTABLE = [chr(c) for c in range(0x21, 0x7F)]
_CATEGORY = {
    "CATEGORY_DIGIT": [chr(c) for c in range(0x30, 0x3A)],
    "CATEGORY_WORD": [c for c in _PRINTABLE if c.isalnum() or c == "_"],
    "CATEGORY_SPACE": [" "],
    "CATEGORY_NOT_DIGIT": [c for c in _PRINTABLE if not c.isdigit()],
    "CATEGORY_NOT_WORD": [c for c in _PRINTABLE if not (c.isalnum() or c == "_")],
    "CATEGORY_NOT_SPACE": _PRINTABLE,
}


def generate(pattern: str, rng: random.Random, limit: int = 1) -> str:
    """A random string `pattern` matches; an unbounded repeat goes at most `limit` past its minimum (as reggen)."""
    pattern = pattern.replace(r"\z", r"\Z")
    try:
        tree = sre_parse.parse(pattern)
    except re.error as exc:
        raise Unsupported(f"regex {pattern!r}: {exc}") from None
    return _gen(list(tree), rng, limit)


def _gen(items: list[Any], rng: random.Random, limit: int) -> str:
    out = []
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(av))
        elif name == "NOT_LITERAL":
            out.append(rng.choice([c for c in _PRINTABLE if ord(c) != av]))
        elif name == "ANY":
            out.append(rng.choice([c for c in _PRINTABLE if c.isalnum()]))
        elif name == "IN":
            out.append(rng.choice(_class(av)))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            hi = lo + limit if hi == sre_parse.MAXREPEAT else hi
            out.extend(_gen(list(sub), rng, limit) for _ in range(rng.randint(lo, hi)))
        elif name == "SUBPATTERN":
            out.append(_gen(list(av[-1]), rng, limit))
        elif name == "BRANCH":
            out.append(_gen(list(rng.choice(av[1])), rng, limit))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        elif name == "CATEGORY":
            out.append(rng.choice(_CATEGORY[str(av)]))
        else:
            raise Unsupported(f"regex node {name}")
    return "".join(out)


def _class(items: list[Any]) -> list[str]:
    chars: list[str] = []
    negate = False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            chars.append(chr(av))
        elif name == "RANGE":
            chars.extend(chr(c) for c in range(av[0], av[1] + 1))
        elif name == "CATEGORY":
            chars.extend(_CATEGORY[str(av)])
        else:
            raise Unsupported(f"class node {name}")
    if negate:
        chars = [c for c in _PRINTABLE if c not in chars]
    return chars


# --- the rule files ------------------------------------------------------------------------------------------------


@dataclass
class RuleSamples:
    rule: str
    tps: list[str]
    fps: list[str]


@dataclass
class Corpus:
    rules: list[RuleSamples] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file:function, why)


_FUNC = re.compile(r"^func (\w+)\(\) \*config\.Rule \{\n(.*?)^\}", re.M | re.S)
_RULE_ID = re.compile(r'RuleID:\s*"([^"]+)"')
_ASSIGN = re.compile(r"^\s*(?:var\s+)?(\w+)(?:\s+\[\]string)?\s*(:=|=)\s*", re.M)


def templates(rules_dir: Path = RULES_DIR) -> list[str]:
    source = (rules_dir / "utils" / "generate.go").read_text()
    block = source[source.index("samples := map[string]string{") :]
    block = block[: block.index("\n\t}\n")]
    toks = [t for t in tokenize(block) if t[0] in ("str", "raw")]
    # key, value pairs: the values are every second string
    return [_go_string(tok[1]) for tok in toks[1::2]]


def load(rules_dir: Path = RULES_DIR) -> Corpus:
    corpus = Corpus()
    tmpl = templates(rules_dir)
    for path in sorted(rules_dir.glob("*.go")):
        source = path.read_text()
        try:  # the file's own top-level `var name = …` (some rules share sample lists)
            file_env = _run(_FUNC.sub("", source), random.Random(path.name), tmpl)
        except Unsupported:
            file_env = {}
        for fn in _FUNC.finditer(source):
            name, body = fn.group(1), fn.group(2)
            where = f"{path.name}:{name}"
            if "utils.Validate(" not in body and "utils.ValidateWithPaths(" not in body:
                continue
            ids = _RULE_ID.findall(body)
            if not ids:
                corpus.skipped.append((where, "no literal RuleID"))
                continue
            try:
                env = _run(body, random.Random(ids[0]), tmpl, dict(file_env))
                tps, fps = env.get("tps", []), env.get("fps", [])
            except (Unsupported, IndexError, KeyError, TypeError, ValueError, StopIteration) as exc:
                corpus.skipped.append((where, f"{type(exc).__name__}: {exc}"))
                continue
            corpus.rules.append(RuleSamples(ids[0], list(tps), list(fps)))
    return corpus


def _run(body: str, rng: random.Random, tmpl: list[str], env: dict[str, Any] | None = None) -> dict[str, Any]:
    """Evaluate the body's assignments in order; the rule literal `r := config.Rule{…}` is skipped."""
    env = {} if env is None else env
    tokens = tokenize(body)
    ev = Evaluator(tokens, env, rng, tmpl)
    depth = 0
    while ev.i < len(tokens):
        kind, text = tokens[ev.i]
        if text in "{([":
            depth += 1
        elif text in "})]":
            depth -= 1
        at_statement = depth == 0 and kind == "ident" and (ev.i == 0 or tokens[ev.i - 1][0] == "nl")
        if at_statement and text not in ("return", "if", "for", "r"):
            j = ev.i + 1 if text != "var" else ev.i + 2
            target = tokens[ev.i][1] if text != "var" else tokens[ev.i + 1][1]
            if j < len(tokens) and tokens[j][1] == "[" and text == "var":
                j += 3  # var name []string = …
            if j < len(tokens) and tokens[j][1] in (":=", "="):
                ev.i = j + 1
                try:
                    env[target] = ev.expr()
                except Unsupported:
                    if target in ("tps", "fps"):
                        raise
                    env.pop(target, None)
                    ev.i = _next_statement(tokens, j + 1)
                continue
        if at_statement and text in ("for", "if") and any(v in _statement_text(tokens, ev.i) for v in ("tps", "fps")):
            raise Unsupported(f"{text} statement building samples")
        ev.i += 1
    return env


def _next_statement(tokens: list[tuple[str, str]], i: int) -> int:
    depth = 0
    while i < len(tokens):
        text = tokens[i][1]
        if text in "{([":
            depth += 1
        elif text in "})]":
            depth -= 1
        elif tokens[i][0] == "nl" and depth <= 0:
            return i
        i += 1
    return i


def _statement_text(tokens: list[tuple[str, str]], i: int) -> str:
    return " ".join(t[1] for t in tokens[i : _next_statement(tokens, i + 1)])
