"""Ids that may become path components: checked before any path is built."""

from __future__ import annotations

import re

from ._errors import InvalidIdError

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_id(value: object) -> bool:
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def check_id(kind: str, value: str) -> str:
    """Return *value* unchanged if it is a valid id, else raise ``InvalidIdError``.

    The pattern admits no ``/`` and no leading ``.``, so a checked id is always
    one ordinary path component: never ``..``, never absolute.
    """
    if not is_id(value):
        raise InvalidIdError(kind, value)
    return value
