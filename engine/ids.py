"""Prefixed, sortable identifiers: ``usr_`` + 26 characters (48-bit millisecond time, 80 random bits).

Crockford base32, so ids sort by creation time as plain strings.
"""

from __future__ import annotations

import os
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
        "tpl",
        "wfl",
        "wrv",
        "wrn",
        "wsa",
        "wap",
        "obx",
        "aud",
        "ses",
        "tok",
        "sil",
    }
)


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    millis = int(time.time() * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_encode(millis, 10)}{_encode(rand, 16)}"


def has_prefix(value: str, prefix: str) -> bool:
    return value.startswith(prefix + "_") and len(value) == len(prefix) + 27
