"""Prefixed, sortable identifiers: ``usr_`` + 26 characters (48-bit millisecond time, 80 random bits).

Crockford base32, so ids sort by creation time as plain strings.
"""

from __future__ import annotations

import os
import re
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"

PREFIXES = frozenset(
    {
        "rlm",
        "usr",
        "spn",
        "org",
        "mem",
        "rol",
        "ras",
        "grp",
        "gmb",
        "whk",
        "whd",
        "tpl",
        "wfl",
        "wrv",
        "wrn",
        "wsa",
        "wsf",
        "wap",
        "apl",
        "ntc",
        "obx",
        "aud",
        "ses",
        "tok",
        "sil",
    }
)


def is_id(value: str, *prefixes: str) -> bool:
    """``value`` has the shape of an id with one of ``prefixes`` (it may still name nothing)."""
    return any(re.fullmatch(rf"{prefix}_[0-9a-z]{{26}}", value) for prefix in prefixes)


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


_last_millis = 0
_last_rand = 0
_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """A new id; ids made by one process in the same millisecond still sort in creation order."""
    global _last_millis, _last_rand
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    with _lock:
        millis = int(time.time() * 1000) & ((1 << 48) - 1)
        if millis <= _last_millis:
            millis = _last_millis
            rand = (_last_rand + 1 + int.from_bytes(os.urandom(2), "big")) & ((1 << 80) - 1)
            if rand <= _last_rand:  # the random part overflowed: borrow the next millisecond
                millis += 1
                rand = int.from_bytes(os.urandom(10), "big") >> 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1
        _last_millis, _last_rand = millis, rand
    return f"{prefix}_{_encode(millis, 10)}{_encode(rand, 16)}"


def id_floor(prefix: str, moment_ms: int) -> str:
    """The smallest id of ``prefix`` made at or after ``moment_ms`` (Unix milliseconds).

    Ids sort by creation time, so a time range of rows is an id range: a list filtered by time
    reads the ``(…, id)`` index it already uses.
    """
    millis = max(0, min(moment_ms, (1 << 48) - 1))
    return f"{prefix}_{_encode(millis, 10)}{'0' * 16}"


def has_prefix(value: str, prefix: str) -> bool:
    return value.startswith(prefix + "_") and len(value) == len(prefix) + 27
