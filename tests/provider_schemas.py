"""Requests checked against the providers' own published definitions.

OpenAI publishes its API as an OpenAPI document (openai/openai-openapi):
``data/openai-chat-request.schema.json`` is its ``CreateChatCompletionRequest``
with every schema that one refers to, checked here as JSON Schema.

Anthropic publishes its request types in its official SDK, as TypedDicts
(``anthropic.types.beta.MessageCreateParamsStreaming``, which has the
``diagnostics`` of the cache-diagnosis beta). Pydantic ignores keys a
TypedDict does not declare, so the SDK's types are walked here instead,
strictly: an undeclared key, a missing required one, a value outside its
``Literal`` or of the wrong type is an error, as the API itself refuses it.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import referencing
import typing_extensions
from anthropic.types.beta.message_create_params import MessageCreateParamsStreaming

__all__ = ("anthropic_errors", "openai_errors")

# Qualifiers of a TypedDict key, from either module.
_WRAPPERS: set[object] = {
    typing.Required,
    typing.NotRequired,
    typing_extensions.Required,
    typing_extensions.NotRequired,
    typing_extensions.ReadOnly,
}
_REQUIRED: set[object] = {typing.Required, typing_extensions.Required}
_NOT_REQUIRED: set[object] = {typing.NotRequired, typing_extensions.NotRequired}
_OPENAI_SCHEMA = Path(__file__).parent / "data" / "openai-chat-request.schema.json"


@cache
def _openai_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(_OPENAI_SCHEMA.read_text())
    resource = referencing.Resource.from_contents(schema)
    registry: referencing.Registry[Any] = referencing.Registry().with_resource("", resource)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def openai_errors(body: bytes) -> list[str]:
    """Where *body* breaks OpenAI's published ``CreateChatCompletionRequest``."""
    found = _openai_validator().iter_errors(json.loads(body))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


def anthropic_errors(body: bytes) -> list[str]:
    """Where *body* breaks the Anthropic SDK's ``MessageCreateParamsStreaming``."""
    return _check(json.loads(body), MessageCreateParamsStreaming, "")


def _check(value: object, kind: object, where: str) -> list[str]:
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin is typing.Annotated:
        return _check(value, args[0], where)
    if origin in _WRAPPERS:
        return _check(value, args[0], where)
    if origin in (typing.Union, types.UnionType):
        tried = [_check(value, member, where) for member in args]
        if any(not errors for errors in tried):
            return []
        return [f"{where}: matches none of {len(args)} types, closest: {min(tried, key=len)}"]
    if origin is typing.Literal:
        return [] if value in args else [f"{where}: {value!r} is not one of {args}"]
    if typing_extensions.is_typeddict(kind):
        return _check_dict(value, kind, where)
    if origin in (Iterable, Sequence, list, tuple) or kind in (list, tuple):
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        item = args[0] if args else object
        return [e for i, v in enumerate(value) for e in _check(v, item, f"{where}/{i}")]
    if origin in (dict, Mapping) or kind in (dict, Mapping):
        return [] if isinstance(value, dict) else [f"{where}: not an object"]
    if kind is type(None) or kind is None:
        return [] if value is None else [f"{where}: not null"]
    if kind is bool:
        return [] if isinstance(value, bool) else [f"{where}: not a boolean"]
    if kind in (int, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{where}: not a number"]
    if kind is str:
        return [] if isinstance(value, str) else [f"{where}: not a string"]
    if kind in (object, typing.Any):
        return []
    if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel):
        # The SDK lets a response block be sent back as it came; a request
        # built from scratch is made of the param TypedDicts.
        return [f"{where}: a response model, not a request param"]
    raise TypeError(f"{where}: no check for {kind!r}: teach provider_schemas about it")


def _check_dict(value: object, kind: object, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: not an object"]
    hints = typing_extensions.get_type_hints(kind, include_extras=True)
    # The SDK's modules postpone annotations, so the class's own required
    # keys miss every Required[...]: read them off the resolved hints.
    declared: frozenset[str] = getattr(kind, "__required_keys__", frozenset())
    required = {
        key
        for key, hint in hints.items()
        if typing.get_origin(hint) in _REQUIRED
        or (key in declared and typing.get_origin(hint) not in _NOT_REQUIRED)
    }
    errors = [f"{where}/{key}: not a field of {kind}" for key in value if key not in hints]
    errors += [f"{where}/{key}: required" for key in required if key not in value]
    for key, item in value.items():
        if key in hints:
            errors += _check(item, hints[key], f"{where}/{key}")
    return errors
