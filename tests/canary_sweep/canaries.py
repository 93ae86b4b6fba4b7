"""Canary secrets for the storage sweep, one of each shape, generated afresh for every door's test.

Each canary is a secret a user could really paste: nothing in the repository looks like one (the repository is
itself secret-scanned), and no test run sees the same value twice, so a hit can only be this test's own leak. A
canary knows which of its characters are public (a provider's prefix, a JWT's fixed header, a PEM's armour): the
sweep looks for every 8-character piece of the rest.
"""

from __future__ import annotations

import base64
import json
import secrets
import string
from dataclasses import dataclass, field, replace
from typing import Any

from tests.fixtures_review.corpus import ALNUM, BASE32, URLSAFE, rnd

PIECE = 8


@dataclass(frozen=True)
class Canary:
    shape: str
    value: str
    public_prefix: int = 0
    # Substrings every secret of the shape shares (a marker inside a key, a PEM's END line): a piece inside one of
    # them is no evidence of this canary.
    public: tuple[str, ...] = field(default_factory=tuple)
    # Characters that join parts of the shape (a JWT's `.`): a piece across one is mostly the fixed part before it.
    joins: str = ""

    def pieces(self) -> set[str]:
        # Line breaks are written escaped ("\n") in JSON: a piece across one is looked for in neither form.
        tail = self.value[self.public_prefix :]
        out = set()
        for i in range(len(tail) - PIECE + 1):
            piece = tail[i : i + PIECE]
            if "\n" in piece or any(c in piece for c in self.joins) or any(piece in marker for marker in self.public):
                continue
            out.add(piece)
        return out


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt() -> tuple[str, int, tuple[str, ...]]:
    """A JWT, the length of its fixed header, and the pieces of its payload that are no evidence of it.

    The payload's base64 holds its fixed JSON (`{"sub": "`, `", "sid": "`, `", "iat": 1700000000}`; a
    certificate's base64 holds `MDAwMDAw`, "000000", as this `iat` does), and where a random value meets the fixed
    JSON a base64 character carries a few bits of each: a piece made mostly of such characters is shared by many
    tokens of this shape (another test's token in a free page of the same database file matched one). A character
    is this token's where payloads of the same shape differ (one in 64 samples); a piece is evidence only when at
    least six of its eight characters are such (30 bits or more)."""
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())

    def payload() -> str:
        return _b64url(json.dumps({"sub": rnd(16), "sid": rnd(16), "iat": 1_700_000_000}).encode())

    mine = payload()
    samples = [payload() for _ in range(64)]
    varies = [any(other[i] != mine[i] for other in samples) for i in range(len(mine))]
    shared = tuple(mine[i : i + PIECE] for i in range(len(mine) - PIECE + 1) if sum(varies[i : i + PIECE]) < PIECE - 2)
    return f"{header}.{mine}.{_b64url(secrets.token_bytes(32))}", len(header) + 1, shared


def _pem() -> tuple[str, str, str]:
    begin, end = "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----"
    body = base64.b64encode(secrets.token_bytes(384)).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"{begin}\n{lines}\n{end}", begin, end


@dataclass(frozen=True)
class Canaries:
    """One canary of every shape. `all` lists them; the attributes name them for the doors that place them."""

    github: Canary
    openai: Canary
    aws_key_id: Canary
    aws_secret: Canary
    jwt: Canary
    private_key: Canary
    password: Canary
    url_password: Canary
    fragment_token: Canary

    @classmethod
    def fresh(cls, door: str = "") -> Canaries:
        """`door` names the door in each shape, for a test that plants two sets through two doors at once."""
        made = cls._fresh()
        if not door:
            return made
        return cls(
            **{
                n: replace(getattr(made, n), shape=f"{getattr(made, n).shape} [{door}]")
                for n in cls.__dataclass_fields__
            }
        )

    @classmethod
    def _fresh(cls) -> Canaries:
        jwt, jwt_prefix, jwt_public = _jwt()
        pem, begin, end = _pem()
        openai = "sk-proj-" + rnd(74, URLSAFE) + "T3BlbkFJ" + rnd(73, URLSAFE) + rnd(1)
        return cls(
            github=Canary("provider token (GitHub)", "ghp_" + rnd(36), 4),
            openai=Canary("provider token (OpenAI sk-proj)", openai, 8, ("T3BlbkFJ",)),
            aws_key_id=Canary("provider token (AWS key id)", "AKIA" + rnd(16, BASE32), 4),
            aws_secret=Canary("provider token (AWS secret key)", rnd(40, ALNUM + "/+")),
            jwt=Canary("JWT", jwt, jwt_prefix, jwt_public, joins="."),
            private_key=Canary("PEM private key", pem, len(begin) + 1, (end,)),
            password=Canary("password field", rnd(20)),
            url_password=Canary("URL credential", rnd(20, string.ascii_letters + string.digits)),
            fragment_token=Canary("fragment token", rnd(40, URLSAFE)),
        )

    @property
    def all(self) -> list[Canary]:
        return [getattr(self, name) for name in self.__dataclass_fields__]

    @property
    def shapes(self) -> list[str]:
        return [c.shape for c in self.all]

    # ---------------------------------------------------------------------------------- the places a door fills

    def database_url(self) -> str:
        return f"postgres://app:{self.url_password.value}@db.internal:5432/app"

    def callback_url(self) -> str:
        return f"https://app.example/callback#access_token={self.fragment_token.value}&token_type=bearer"

    def prose(self) -> str:
        """The provider tokens as a tool's output mentions them, in sentences (a token ends at punctuation)."""
        return (
            f"Deploy used {self.github.value} for the checkout. The OpenAI key was {self.openai.value}. "
            f"AWS: {self.aws_key_id.value} / {self.aws_secret.value}"
        )

    def in_context(self) -> list[tuple[Canary, str]]:
        """Each canary alone, in a line of text as a person would paste it."""
        return [
            (self.github, f"token {self.github.value}, scoped to the repo"),
            (self.openai, f"The OpenAI key was {self.openai.value}."),
            (self.aws_key_id, f"aws_access_key_id = {self.aws_key_id.value}"),
            (self.aws_secret, f"AWS: {self.aws_key_id.value} / {self.aws_secret.value}"),
            (self.jwt, f"Authorization: Bearer {self.jwt.value}"),
            (self.private_key, self.private_key.value),
            (self.password, json.dumps({"username": "ops", "password": self.password.value})),
            (self.url_password, self.database_url()),
            (self.fragment_token, f"Location: {self.callback_url()}"),
        ]

    def document(self) -> dict[str, Any]:
        """Every canary in a JSON object as a tool's result or a config dump holds them."""
        return {
            "status": "ok",
            "log": self.prose(),
            "aws": {"aws_access_key_id": self.aws_key_id.value, "aws_secret_access_key": self.aws_secret.value},
            "id_token": self.jwt.value,
            "private_key": self.private_key.value,
            "user": {"name": "ops", "password": self.password.value},
            "database_url": self.database_url(),
            "redirect": self.callback_url(),
        }

    def environment_text(self) -> str:
        """Every canary as lines of a `.env` file or a command's output."""
        return (
            f"GITHUB_TOKEN={self.github.value}\nOPENAI_API_KEY={self.openai.value}\n"
            f"AWS_ACCESS_KEY_ID={self.aws_key_id.value}\nAWS_SECRET_ACCESS_KEY={self.aws_secret.value}\n"
            f"ID_TOKEN={self.jwt.value}\nPASSWORD={self.password.value}\nDATABASE_URL={self.database_url()}\n"
            f"CALLBACK={self.callback_url()}\n{self.private_key.value}\n"
        )
