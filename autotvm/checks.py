"""What a user passes in, checked where it enters: one rule per kind of option, one error type.

A rule is a small JSON Schema (``integer``, ``number``, ``choice``, ``flag``, ``text``,
``integers``), so the same rule serves a constructor (``check``), a tuner's declared ``OPTIONS``
(``check_options``) and the driver's config schema, which embeds the tuners' rules as they are.
A value that breaks its rule is an ``AutoTVMError``: one line naming the option and what is allowed.
"""

from __future__ import annotations

from typing import Any, Mapping

import jsonschema
import numpy as np


class AutoTVMError(ValueError):
    """A user-facing error: its message is one line naming what is wrong and what is allowed."""


def _or_none(rule: dict, none: bool) -> dict:
    return {"anyOf": [{"type": "null"}, rule]} if none else rule


def integer(low: int | None = None, high: int | None = None, none: bool = False) -> dict:
    """An integer (not a bool) in ``[low, high]``; ``none``: ``None`` is allowed too."""
    rule: dict = {"type": "integer"}
    if low is not None:
        rule["minimum"] = low
    if high is not None:
        rule["maximum"] = high
    return _or_none(rule, none)


def number(low: float | None = None, high: float | None = None, above: float | None = None,
           none: bool = False) -> dict:
    """A number (not a bool) in ``[low, high]``, or ``> above``."""
    rule: dict = {"type": "number"}
    if low is not None:
        rule["minimum"] = low
    if above is not None:
        rule["exclusiveMinimum"] = above
    if high is not None:
        rule["maximum"] = high
    return _or_none(rule, none)


def choice(values: Any, none: bool = False) -> dict:
    """One of ``values``."""
    return _or_none({"enum": list(values)}, none)


def flag() -> dict:
    """True or false."""
    return {"type": "boolean"}


def text(none: bool = False) -> dict:
    """A non-empty string."""
    return _or_none({"type": "string", "minLength": 1}, none)


def integers(low: int = 1) -> dict:
    """A non-empty list of integers >= ``low``."""
    return {"type": "array", "items": integer(low), "minItems": 1}


def _is_array(_checker: Any, value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _is_integer(_checker: Any, value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(_checker: Any, value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


# JSON's types as Python values arrive: a tuple is a list, NumPy's numbers are numbers
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"array": _is_array, "integer": _is_integer, "number": _is_number})
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)


def describe(rule: Mapping) -> str:
    """What a rule allows, in words ("an integer >= 2", "one of: a, b", "a number > 0 or None")."""
    if "anyOf" in rule:
        words = [describe(r) for r in rule["anyOf"] if r.get("type") != "null"]
        return " or ".join(words + ["None"] * (len(words) < len(rule["anyOf"])))
    if "enum" in rule:
        return "one of: " + ", ".join(map(str, rule["enum"]))
    kind = rule.get("type")
    if kind == "boolean":
        return "true or false"
    if kind == "string":
        return "a non-empty string" if rule.get("minLength") else "a string"
    if kind == "array":
        return f"a list of {describe(rule['items']).replace('an integer', 'integers')}"
    if kind == "object":
        return "an object"
    words = "an integer" if kind == "integer" else "a number"
    low, high, above = rule.get("minimum"), rule.get("maximum"), rule.get("exclusiveMinimum")
    if low is not None and high is not None:
        return f"{words} in {low}..{high}" if kind == "integer" else f"{words} in [{low:g}, {high:g}]"
    if above is not None:
        return f"{words} > {above:g}"
    if low is not None:
        return f"{words} >= {low:g}"
    if high is not None:
        return f"{words} <= {high:g}"
    return words


def valid(value: Any, rule: Mapping) -> bool:
    return Validator(rule).is_valid(value)


def check(name: str, value: Any, rule: Mapping) -> Any:
    """``value`` if it keeps ``rule``, else an ``AutoTVMError`` naming ``name``."""
    if not valid(value, rule):
        raise AutoTVMError(f"{name} must be {describe(rule)}, got {value!r}")
    return value


def check_options(rules: Mapping[str, Mapping], values: Mapping[str, Any], prefix: str = "") -> None:
    """Check each of ``values`` by its rule in ``rules`` (``prefix`` names their owner)."""
    for name, value in values.items():
        check(f"{prefix}{name}", value, rules[name])


def check_int(name: str, value: Any, low: int = 1) -> int:
    """``value`` if it is an integer >= ``low`` (not a bool, not a string)."""
    return int(check(name, value, integer(low)))


def check_number(name: str, value: Any, low: float = 0.0, strict: bool = False) -> float:
    """``value`` as a float if it is a number >= ``low`` (> with ``strict``)."""
    return float(check(name, value, number(above=low) if strict else number(low)))


def check_seed(seed: Any) -> int | None:
    """A tuner's seed: an integer >= 0, or None."""
    return check("seed", seed, integer(0, none=True))
