"""Typed values from YAML and the command line: the one conversion of config fields
(`lra.config`) and attention options (`lra.attention`).

    coerce(value, annotation, key) -> the value as `annotation`, or ValueError naming `key`

Rules (a value already of the type passes unchanged; strings are stripped):
- bool: true / yes / y / on / 1 and false / no / n / off / 0 (any case), and the integers 0 and 1;
- int: integers, integral floats and strings such as "1_000" or "1e3"; never a bool;
- float: numbers and numeric strings; never a bool;
- str: strings, and numbers written as strings;
- Literal[...]: one of the choices (a string may name a non-string choice); an unknown one gets a
  "did you mean" hint;
- X | None: None, or one of none / null / ~ / auto / "" (unless that word is a choice of X);
  otherwise the first member of the union that accepts the value;
- list[X] / tuple[X, ...]: a YAML list or a comma-separated string ("1,2" or "[1, 2]"), each item
  converted as X;
- dict: a mapping.
"""
from __future__ import annotations

import difflib
import math
import types
import typing
from typing import Any, Literal, Union

TRUE_WORDS = frozenset({"true", "yes", "y", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "n", "off", "0"})
NONE_WORDS = frozenset({"none", "null", "~", "auto", ""})


def type_name(annotation: Any) -> str:
    """Readable name of a type: int, float | None, {'auto', 'flash', ...}, list[int]."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "{" + ", ".join(repr(c) for c in typing.get_args(annotation)) + "}"
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _expected(annotation: Any) -> str:
    """What an error says was expected."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(c) for c in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        parts = [_expected(a) for a in typing.get_args(annotation) if a is not type(None)]
        none = " or none" if type(None) in typing.get_args(annotation) else ""
        return " or ".join(parts) + none
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            dict: "a mapping"}.get(annotation) or (
        f"a list of {_expected(_item_type(annotation))}" if origin in (list, tuple) else type_name(annotation))


def _item_type(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
    return args[0] if args else Any


def _bad(value: Any, annotation: Any, key: str, hint: str = "") -> ValueError:
    return ValueError(f"{key}: expected {_expected(annotation)}, got {value!r}{hint}")


def _literal(value: Any, annotation: Any, key: str) -> Any:
    choices = typing.get_args(annotation)
    for choice in choices:
        if value == choice and type(value) is type(choice):
            return choice
    if isinstance(value, str):
        for choice in choices:
            if value.strip() == str(choice):
                return choice
    close = difflib.get_close_matches(str(value).strip(), [str(c) for c in choices], n=1)
    raise _bad(value, annotation, key, f"; did you mean {close[0]!r}?" if close else "")


def _union(value: Any, annotation: Any, key: str) -> Any:
    args = typing.get_args(annotation)
    members = [a for a in args if a is not type(None)]
    if type(None) in args:
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() in NONE_WORDS:
            named = any(typing.get_origin(a) is Literal and value.strip() in map(str, typing.get_args(a))
                        for a in members)
            if not named:
                return None
    for member in members:
        try:
            return coerce(value, member, key)
        except ValueError:
            continue
    raise _bad(value, annotation, key)


def _sequence(value: Any, annotation: Any, key: str) -> Any:
    origin = typing.get_origin(annotation)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        items = [item.strip() for item in text.split(",")] if text.strip() else []
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise _bad(value, annotation, key)
    item_type = _item_type(annotation)
    converted = [item if item_type is Any else coerce(item, item_type, f"{key}[{i}]")
                 for i, item in enumerate(items)]
    return tuple(converted) if origin is tuple else converted


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """`value` (a YAML value or a command-line string) as type `annotation`; ValueError naming `key`
    for a value that does not fit, TypeError for a type these rules do not cover (a bug of ours)."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return _union(value, annotation, key)
    if origin is Literal:
        return _literal(value, annotation, key)
    if origin in (list, tuple):
        return _sequence(value, annotation, key)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
            return value.strip().lower() in TRUE_WORDS
        raise _bad(value, annotation, key)
    if annotation is int:
        if isinstance(value, bool):
            raise _bad(value, annotation, key)
        if isinstance(value, int):
            return value
        try:
            number = float(value.strip().replace("_", "")) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise _bad(value, annotation, key) from None
        if not (math.isfinite(number) and number.is_integer()):
            raise _bad(value, annotation, key)
        return int(number)
    if annotation is float:
        if isinstance(value, bool):
            raise _bad(value, annotation, key)
        try:
            return float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise _bad(value, annotation, key) from None
    if annotation is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise _bad(value, annotation, key)
    if annotation is dict or origin is dict:
        if isinstance(value, dict):
            return dict(value)
        raise _bad(value, annotation, key)
    if annotation is Any:
        return value
    raise TypeError(f"{key}: no conversion to {annotation!r}")
