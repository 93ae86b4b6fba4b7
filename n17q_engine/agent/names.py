"""OpenAI function names for MCP tool names (issue 36; docs/agents.md, "Tool names for OpenAI function calling").

A contract's tool name follows the identifier grammar (`n17q_engine.identifiers`): ASCII letters and digits,
``- _ . : @ + ~ =``, non-ASCII letters, marks and digits, up to 200 characters. An OpenAI function name must match
``^[a-zA-Z0-9_-]{1,64}$``, so `shell.run` cannot be one. The rule, with ``-`` as the escape character:

- an ASCII letter, digit or ``_`` stands for itself;
- ``.`` is written ``--`` and ``-`` is written ``-_``;
- any other character is written ``-x`` + its code point in lower-case hexadecimal + ``_`` (``:`` is ``-x3a_``).

`shell.run` is `shell--run`, `email.draft_create` is `email--draft_create`. Every escape starts with ``-`` and is
told apart by the character after it, so the encoding is a prefix code: two names never share an encoding, and
`tool_name` reads one back. A name whose encoding is longer than 64 characters keeps its first 53 characters and
ends ``-h`` + 9 hexadecimal characters of its sha256: no longer readable back by the rule, it is found in the
scenario's own table (the engine's MCP server accepts a tool's OpenAI name wherever it accepts its name).
"""

from __future__ import annotations

import hashlib
import re

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_OPENAI_NAME = 64
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def openai_name(tool: str) -> str:
    """The OpenAI function name of MCP tool `tool` (the rule above)."""
    out: list[str] = []
    for char in tool:
        if char in _PLAIN:
            out.append(char)
        elif char == ".":
            out.append("--")
        elif char == "-":
            out.append("-_")
        else:
            out.append(f"-x{ord(char):x}_")
    name = "".join(out)
    if len(name) <= MAX_OPENAI_NAME:
        return name
    return name[:53] + "-h" + hashlib.sha256(tool.encode()).hexdigest()[:9]


def tool_name(name: str) -> str | None:
    """The tool name an OpenAI function name stands for by the rule, or None when it is not an encoding (a hashed
    long name, or a malformed escape)."""
    out: list[str] = []
    i = 0
    while i < len(name):
        char = name[i]
        if char in _PLAIN:
            out.append(char)
            i += 1
            continue
        if char != "-" or i + 1 >= len(name):
            return None
        kind = name[i + 1]
        if kind == "-":
            out.append(".")
            i += 2
        elif kind == "_":
            out.append("-")
            i += 2
        elif kind == "x":
            end = name.find("_", i + 2)
            digits = name[i + 2 : end] if end > 0 else ""
            if (
                not digits
                or any(c not in "0123456789abcdef" for c in digits)
                or digits != digits.lstrip("0")
                or (int(digits, 16) > 0x10FFFF)
            ):
                return None
            out.append(chr(int(digits, 16)))
            i = end + 1
        else:
            return None
    return "".join(out)
