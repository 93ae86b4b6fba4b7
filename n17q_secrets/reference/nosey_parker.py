"""The second reference rule set: Nosey Parker's `default` rules (vendored beside this file under `noseyparker/`,
Apache-2.0, origin and commit in `README.md`; `scripts/update_noseyparker_rules.py` refreshes them), run on the
same engine as gitleaks' (RE2 over the text's UTF-8 bytes, and the one-pass literal prefilter of
`n17q_secrets.scanning.Prefilter`).

Nosey Parker compiles a rule with Rust's `regex` crate (bytes, Unicode off) after removing `(?# … )` comments,
finds candidates with Vectorscan, and reports the match's capture groups. Translated here (`to_re2`):

- `(?# … )` comments are removed as Nosey Parker removes them (its own pattern, `\\(\\?#[^)]*\\)`).
- Verbose mode (`x`, which RE2 lacks) is applied by the loader: whitespace is dropped and `#` starts a comment to
  the end of the line, inside character classes too (Rust's rule); an escaped space or `#` stays a literal. The
  flag is followed where it is set, for the group it is set in.
- `\\s` is Rust's ASCII class, which holds the vertical tab; RE2's does not: written out as a class.
- Followed only approximately, in the direction of reporting more, never less: RE2 reads UTF-8, so `.` and a
  negated class take a whole character where Rust takes a byte (`.{0,40}` can reach further), and `(?i)` folds
  Unicode letters too (a `k` also matches the Kelvin sign).
- A repetition count past RE2's limit of 1000 (`{20,1024}`, which Rust accepts) is written as repetitions within
  it one after another (`{20,1000}` then `{0,24}`): the same texts.
- What cannot be followed (a Rust construct RE2 lacks: class set operations, nested classes, look-around, the `R`
  flag) makes the rule not compiled: listed in `NoseyParkerRules.not_compiled` and reported, never dropped
  silently. At the vendored commit that is no rule of the 168.

Nosey Parker has no keyword list: its prefilter is Vectorscan running every pattern at once. Here each rule's
literals are derived from its pattern (`required_literals`): a set of strings one of which every match holds
(compared without case, as the prefilter compares). A rule whose pattern has no literal of at least
`MIN_LITERAL` characters still runs, on every text: correctness before speed.

The secret is every non-empty capture group of a match (a rule's groups name a credential's parts: an id and its
secret, a user and a password), else the whole match; a group of several that names a place (a host, a URL without
user info: `_PLACE`) is where the credential is used, not part of it, and is left as it is.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2
import yaml

from . import compile_rule, decode, iter_spans

# Python's own regex parser (`re._parser`, private: typeshed names it for no mypy release alike), read as a module.
sre_parse = importlib.import_module("re._parser")

RULES_DIR = Path(__file__).with_name("noseyparker")
RULESET = "default"
MIN_LITERAL = 3  # a shorter literal (`-`, `00`) is in nearly every body: the rule runs on every text instead

_COMMENT = re.compile(r"\(\?#[^)]*\)")  # Nosey Parker's own (noseyparker-rules/src/rule.rs)
_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_RUST_ASCII_SPACE = r"\t\n\x0B\x0C\r\x20"


class NotTranslatable(ValueError):
    pass


def to_re2(pattern: str) -> str:
    """A Nosey Parker pattern (Rust regex syntax, Unicode off) as the RE2 pattern that matches the same texts;
    NotTranslatable when it uses what RE2 lacks."""
    pattern = _COMMENT.sub("", pattern)
    out: list[str] = []
    frames: list[tuple[bool, int]] = []  # per open group: verbose mode outside it, where it starts in `out`
    verbose = False
    atom = 0  # where the last atom starts in `out` (what a repetition applies to)
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if verbose and c.isspace():
            i += 1
            continue
        if verbose and c == "#":
            end = pattern.find("\n", i)
            i = n if end == -1 else end + 1
            continue
        if c == "\\":
            atom = len(out)
            i = _escape(pattern, i, out, in_class=False)
            continue
        if c == "[":
            atom = len(out)
            i = _char_class(pattern, i, out, verbose)
            continue
        if c == "{":
            m = _REPEAT.match(pattern, i)
            if m is not None and max(int(m.group(1)), int(m.group(3) or 0)) > _RE2_MAX_REPEAT:
                out[atom:] = [_long_repeat("".join(out[atom:]), int(m.group(1)), m.group(2), m.group(3))]
                i = m.end()
                continue
        if c == "(":
            m = _FLAGS.match(pattern, i)
            if m is not None and (m.group(1) or m.group(2) is not None):
                on, off, close = m.group(1), m.group(2) or "", m.group(3)
                if set(on + off) - set("imsxU"):
                    raise NotTranslatable(f"flag {m.group()!r}")
                new = (verbose or "x" in on) and "x" not in off
                on, off = on.replace("x", ""), off.replace("x", "")
                flags = on + (f"-{off}" if off else "")
                if close == ":":
                    frames.append((verbose, len(out)))
                    out.append(f"(?{flags}:")
                elif flags:
                    out.append(f"(?{flags})")
                verbose = new
                i = m.end()
                continue
            if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
                raise NotTranslatable("look-around")
            frames.append((verbose, len(out)))
            out.append(c)
            i += 1
            continue
        if c == ")":
            if frames:
                verbose, atom = frames.pop()
            out.append(c)
            i += 1
            continue
        if c not in "*+?|{}^$":
            atom = len(out)
        out.append(c)
        i += 1
    return "".join(out)


_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")
_RE2_MAX_REPEAT = 1000  # RE2 refuses a repetition count above this; Rust's regex has no such limit


def _long_repeat(atom: str, low: int, comma: str | None, high: str | None) -> str:
    """`atom{low,high}` for counts past RE2's limit, as repetitions within it one after another: `x{20,1024}` is
    `x{20,1000}` then `x{0,24}` (each of the counts a run of the atom, so the same texts match)."""
    top = None if comma and not high else int(high) if high else low
    group = f"(?:{atom})"
    parts: list[str] = []
    while low > _RE2_MAX_REPEAT:
        parts.append(f"{group}{{{_RE2_MAX_REPEAT}}}")
        low -= _RE2_MAX_REPEAT
        top = None if top is None else top - _RE2_MAX_REPEAT
    if top is None:
        return "".join([*parts, f"{group}{{{low},}}"])
    first = min(top, _RE2_MAX_REPEAT)
    parts.append(f"{group}{{{low},{first}}}")
    left = top - first
    while left > 0:
        step = min(left, _RE2_MAX_REPEAT)
        parts.append(f"{group}{{0,{step}}}")
        left -= step
    return "".join(parts)


def _escape(pattern: str, i: int, out: list[str], *, in_class: bool) -> int:
    nxt = pattern[i + 1 : i + 2]
    if nxt == "":
        raise NotTranslatable("trailing backslash")
    if nxt.isspace():  # an escaped space (verbose mode's way of writing one)
        out.append(f"\\x{ord(nxt):02X}")
    elif nxt == "s":
        out.append(_RUST_ASCII_SPACE if in_class else f"[{_RUST_ASCII_SPACE}]")
    elif nxt == "S" and not in_class:
        out.append(f"[^{_RUST_ASCII_SPACE}]")
    elif nxt == "x":  # a byte by its code, one atom: \x41 or \x{41}
        end = pattern.find("}", i) + 1 if pattern.startswith("{", i + 2) else i + 4
        if end <= i:
            raise NotTranslatable("unclosed \\x{")
        out.append(pattern[i:end])
        return end
    elif nxt in "pP":
        raise NotTranslatable("a Unicode class (Nosey Parker runs with Unicode off)")
    else:
        out.append(pattern[i : i + 2])
    return i + 2


def _char_class(pattern: str, i: int, out: list[str], verbose: bool) -> int:
    out.append("[")
    i += 1
    if pattern.startswith("^", i):
        out.append("^")
        i += 1
    first = True
    while i < len(pattern):
        c = pattern[i]
        if verbose and c.isspace():
            i += 1
            continue
        if verbose and c == "#":
            end = pattern.find("\n", i)
            i = len(pattern) if end == -1 else end + 1
            continue
        if c == "]" and not first:
            out.append("]")
            return i + 1
        first = False
        if c == "\\":
            i = _escape(pattern, i, out, in_class=True)
            continue
        if c == "[":
            if pattern.startswith("[:", i):
                end = pattern.find(":]", i)
                if end == -1:
                    raise NotTranslatable("unclosed POSIX class")
                out.append(pattern[i : end + 2])
                i = end + 2
                continue
            raise NotTranslatable("a nested character class")
        if pattern.startswith(("&&", "--", "~~"), i):
            raise NotTranslatable("a class set operation")
        out.append(c)
        i += 1
    raise NotTranslatable("unclosed character class")


# --- the literals every match holds ---------------------------------------------------------------------------

_MAX_EXACT = 64  # alternatives of an exact set, past which a part is no longer expanded


def required_literals(re2_pattern: str) -> tuple[str, ...]:
    """Lower-case strings one of which every match of `re2_pattern` holds, compared without case; () when the
    pattern has none of at least MIN_LITERAL characters (the rule then runs on every text)."""
    python = re.sub(r"\(\?[a-zA-Z]*(?:-[a-zA-Z]*)?\)", "", re2_pattern)  # case does not matter to the prefilter
    python = re.sub(r"\(\?[a-zA-Z]*(?:-[a-zA-Z]*)?:", "(?:", python).replace(r"\z", r"\Z")
    try:
        tree = sre_parse.parse(python)
    except re.error:
        return ()
    _exact, required, _starts = _literals(list(tree))
    if not required or min(len(s) for s in required) < MIN_LITERAL:
        return ()
    # A text holding `aws_secret` holds `aws`: the shortest of the literals are enough.
    return tuple(sorted(s for s in required if not any(o != s and o in s for o in required)))


def _better(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    def score(s: set[str] | None) -> tuple[int, int]:
        return (min(len(x) for x in s), -len(s)) if s else (0, 0)

    return a if score(a) >= score(b) else b


def _product(a: set[str], b: set[str]) -> set[str] | None:
    return {x + y for x in a for y in b} if len(a) * len(b) <= _MAX_EXACT else None


Literals = tuple[set[str] | None, set[str] | None, set[str] | None]


def _literals(items: list[Any]) -> Literals:
    """For a sequence: (every string it matches, when few; a set one of whose strings every match holds; a set one
    of whose strings every match starts with), each None when there is none."""
    best: set[str] | None = None
    current: set[str] | None = {""}  # every string the items so far match, while they are exact
    prefix: set[str] | None = None
    whole = True
    for op, av in items:
        exact, required, starts = _item(str(op), av)
        if exact is not None and current is not None:
            joined = _product(current, exact)
            if joined is not None:
                current = joined
                continue
        if whole:  # the exact strings so far, followed by how this item starts: how every match starts
            prefix = _product(current, starts) if current is not None and starts else current
            if prefix is not None and "" in prefix:
                prefix = None
            best = _better(best, prefix)
        whole = False
        if current is not None and "" not in current:
            best = _better(best, current)
        best = _better(best, required)
        current = exact if exact is not None and len(exact) <= _MAX_EXACT else {""}
    if current is not None and "" not in current:
        best = _better(best, current)
    if whole:
        return current, best, current if current is not None and "" not in current else None
    return None, best, prefix


def _union_of_all(sets: list[set[str] | None]) -> set[str] | None:
    """The union when every branch has its set, else None (a branch with none: no string every match holds)."""
    out: set[str] = set()
    for one in sets:
        if not one:
            return None
        out |= one
    return out


def _item(op: str, av: Any) -> Literals:
    if op == "LITERAL":
        return {chr(av).lower()}, {chr(av).lower()}, {chr(av).lower()}
    if op == "AT":
        return {""}, None, None
    if op == "IN":
        chars: set[str] = set()
        for kind, value in av:
            if str(kind) == "LITERAL":
                chars.add(chr(value).lower())
            elif str(kind) == "RANGE" and value[1] - value[0] < 8:
                chars.update(chr(c).lower() for c in range(value[0], value[1] + 1))
            else:
                return None, None, None
        return (chars, chars, chars) if 0 < len(chars) <= 8 else (None, None, None)
    if op == "SUBPATTERN":
        return _literals(list(av[-1]))
    if op == "BRANCH":
        branches = [_literals(list(branch)) for branch in av[1]]
        exacts = [b[0] for b in branches]
        requireds = [b[0] if b[0] is not None and "" not in b[0] else b[1] for b in branches]
        prefixes = [b[0] if b[0] is not None and "" not in b[0] else b[2] for b in branches]
        return _union_of_all(exacts), _union_of_all(requireds), _union_of_all(prefixes)
    if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        lo, hi, sub = av
        exact, required, starts = _literals(list(sub))
        if lo == 0:
            return (exact | {""} if exact is not None and hi == 1 else None), None, None
        if exact is not None and lo == hi and len(exact) ** lo <= _MAX_EXACT:
            product = {""}
            for _ in range(lo):
                product = {a + b for a in product for b in exact}
            return product, (product if "" not in product else required), (product if "" not in product else starts)
        if exact is not None and "" not in exact:
            return None, exact, exact
        return None, required, starts
    return None, None, None


# A group that names where a credential is used, not the credential: a host (and port), a URL with no user info, a
# netrc `machine` line. Nosey Parker's credential rules capture it beside the user and the password (a MongoDB or
# PostgreSQL URI's host, an Auth0 domain, an LDAP path, an SMTP host); masked, every `localhost` of a body would go.
_PLACE = re.compile(
    rb"(?:machine\s+)?(?:[A-Za-z][A-Za-z0-9+.-]*://)?"
    rb"(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)(?::\d{1,5})?(?:/[A-Za-z0-9._~/-]*)?"
)


# --- the rule set ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoseyParkerRule:
    id: str  # Nosey Parker's (`np.github.1`); findings name it by `slug`
    name: str
    pattern: str  # as vendored
    re2_pattern: str  # as translated (`to_re2`)
    regex: Any  # RE2
    literals: tuple[str, ...]  # () when it runs on every text
    examples: tuple[str, ...]
    negative_examples: tuple[str, ...]

    @property
    def slug(self) -> str:
        """The finding's rule name: `np-github-1` (a masked token's rule is lower-case letters, digits, `-`)."""
        return re.sub(r"[^a-z0-9]+", "-", self.id.lower()).strip("-")

    def find_bytes(self, data: bytes) -> Iterator[str]:
        """The secret of every match in `data` (UTF-8): each non-empty capture group that does not name a place,
        else the whole match."""
        for spans in iter_spans(self.regex, data):
            groups = [(a, b) for a, b in spans[1:] if b > a >= 0] or spans[:1]
            for a, b in groups:
                if len(groups) == 1 or not _PLACE.fullmatch(data, a, b):
                    yield decode(data[a:b])

    def find(self, text: str) -> Iterator[str]:
        return self.find_bytes(text.encode("utf-8", "surrogatepass"))


# libyaml's loader where PyYAML was built with it (its wheels are): every process that scans (the importer's check of a
# large events file runs in a process of its own, per run) reads the 88 rule files, 0.4 s in pure Python.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)  # a safe loader, C or Python


@dataclass
class NoseyParkerRules:
    rules: tuple[NoseyParkerRule, ...]
    not_compiled: list[tuple[str, str]] = field(default_factory=list)
    commit: str = ""

    @classmethod
    def load(cls, folder: Path = RULES_DIR, ruleset: str = RULESET) -> NoseyParkerRules:
        """The rules of `ruleset` (Nosey Parker's `default`: secrets, not identifiers or hashes), compiled."""
        by_id: dict[str, dict[str, Any]] = {}
        for path in sorted((folder / "rules").glob("*.yml")):
            for raw in _yaml(path).get("rules") or []:
                by_id[raw["id"]] = raw
        sets = _yaml(folder / "rulesets" / f"{ruleset}.yml")["rulesets"]
        include = next(s for s in sets if s["id"] == ruleset)["include_rule_ids"]
        rules: list[NoseyParkerRule] = []
        not_compiled: list[tuple[str, str]] = []
        for rule_id in include:
            raw = by_id.get(rule_id)
            if raw is None:
                not_compiled.append((rule_id, "named by the rule set, defined by no rule file"))
                continue
            try:
                translated = to_re2(raw["pattern"])
                regex = compile_rule(translated)
            except (NotTranslatable, re2.error) as exc:  # fail closed: listed, reported, never silently dropped
                not_compiled.append((rule_id, str(exc)))
                continue
            rules.append(
                NoseyParkerRule(
                    id=rule_id,
                    name=str(raw.get("name", "")),
                    pattern=raw["pattern"],
                    re2_pattern=translated,
                    regex=regex,
                    literals=required_literals(translated),
                    examples=tuple(raw.get("examples") or ()),
                    negative_examples=tuple(raw.get("negative_examples") or ()),
                )
            )
        return cls(tuple(rules), not_compiled)


_LOADED: NoseyParkerRules | None = None


def nosey_parker_rules() -> NoseyParkerRules:
    """The vendored rule set, compiled once per process."""
    global _LOADED
    if _LOADED is None:
        _LOADED = NoseyParkerRules.load()
    return _LOADED
