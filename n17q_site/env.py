"""Typed readers for environment variables that fail loudly on a value they cannot use.

A misspelt boolean or a non-numeric port should stop the process at start-up with the variable's
name, not quietly fall back to a default that hides the mistake.
"""

from __future__ import annotations

import os
from typing import Any


class ConfigurationError(RuntimeError):
    pass


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ConfigurationError(f"environment variable {name} is required")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigurationError(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ConfigurationError(f"{name}={value!r} is not an integer") from None
    if minimum is not None and parsed < minimum:
        raise ConfigurationError(f"{name}={parsed} is below the minimum {minimum}")
    return parsed


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


# Sensitivity labels a retention class may carry (docs/retention.md): what the material is, for the pages.
SENSITIVITIES = ("public", "internal", "sensitive")
_PERIOD_UNITS = {"d": 86400, "h": 3600}


def env_retention_classes(name: str, default: str) -> dict[str, tuple[int | None, str]]:
    """Declared retention classes: `class=period:sensitivity,…` → {class: (seconds or None, sensitivity)}.

    A period is `forever` or a whole number of days (`30d`) or hours (`12h`). A class declared twice, a period or
    a sensitivity this cannot read stops the process with the variable's name: a typo here would otherwise
    delete material early or keep it forever without anyone noticing.
    """
    value = os.environ.get(name, default)
    classes: dict[str, tuple[int | None, str]] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        label, eq, rest = item.partition("=")
        period, colon, sensitivity = rest.partition(":")
        label, period, sensitivity = label.strip(), period.strip(), sensitivity.strip()
        if not eq or not colon or not label or not period:
            raise ConfigurationError(f"{name}: {item!r} is not class=period:sensitivity (e.g. transient=30d:internal)")
        if label in classes:
            raise ConfigurationError(f"{name}: class {label!r} is declared twice")
        if sensitivity not in SENSITIVITIES:
            raise ConfigurationError(f"{name}: class {label!r}: sensitivity must be one of {', '.join(SENSITIVITIES)}")
        seconds: int | None
        if period == "forever":
            seconds = None
        elif period[:-1].isdigit() and period[-1:] in _PERIOD_UNITS and int(period[:-1]) > 0:
            seconds = int(period[:-1]) * _PERIOD_UNITS[period[-1]]
        else:
            raise ConfigurationError(f"{name}: class {label!r}: period {period!r} is not forever, <n>d or <n>h")
        classes[label] = (seconds, sensitivity)
    if not classes:
        raise ConfigurationError(f"{name} declares no retention class")
    return classes


def env_price_table(name: str) -> dict[str, Any]:
    """The model price table (n17q_engine.pricing, issue 38): `name` holds the table as JSON text, or `name`_FILE the
    path of a JSON file holding it; neither: no model is priced (pages say "no price", never a cost of 0)."""
    import json

    from n17q_engine.pricing import price_table

    text = os.environ.get(name)
    path = os.environ.get(f"{name}_FILE")
    if text and path:
        raise ConfigurationError(f"{name} and {name}_FILE are both set: give the price table one way")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read(1024 * 1024)
        except OSError as exc:
            raise ConfigurationError(f"{name}_FILE={path}: {exc.strerror}") from None
    if not text:
        return {}
    try:
        return price_table(json.loads(text))
    except ValueError as exc:
        raise ConfigurationError(f"{name}: {exc}") from None
