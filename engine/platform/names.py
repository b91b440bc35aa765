"""Names and emails people can tell apart.

- **NFKC**: every name and email is stored in Unicode normalization form NFKC, so a fullwidth
  ``ｂob@…`` is ``bob@…`` and uniqueness holds for what people see, not for code points.
- **Invisible and bidirectional controls** (zero-width spaces and joiners, direction
  overrides and isolates, soft hyphens, fillers) are refused in names and emails: they make
  ``realm-\u200badmin`` look like ``realm-admin`` or reorder what a reader sees.
- **Mixed scripts**: an email, or a role, group, organization or service-principal name,
  that mixes Latin with Cyrillic or Greek letters (``bоb`` with a Cyrillic ``о``) is refused;
  each alone is fine.
"""

from __future__ import annotations

import re
import unicodedata

from engine.platform.errors import Issue

# Characters that render as nothing (or as blank space) without being categorised as format.
_BLANK_LOOKING = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u034f", "\u17b4", "\u17b5"}
_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def normalize(value: str) -> str:
    """NFKC, surrounding white space removed."""
    return unicodedata.normalize("NFKC", value).strip()


def fold(value: str) -> str:
    """The key two names must not share: NFKC, case-folded, NFKC again, and without the accents
    and dots on Latin, Greek and Cyrillic letters.

    Case folding alone leaves ``REALM-ADMİN`` apart from ``realm-admin``: ``İ`` folds to ``i``
    followed by a combining dot above. A mark on a letter of those scripts does not make a name
    another one; marks of other scripts (where they are letters' vowels) are kept.
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())
    kept: list[str] = []
    on_alphabet = False
    for char in unicodedata.normalize("NFD", folded):
        if unicodedata.combining(char):
            if on_alphabet:
                continue
        else:
            on_alphabet = unicodedata.name(char, "").startswith(_SCRIPTS)
        kept.append(char)
    return unicodedata.normalize("NFC", "".join(kept)).strip()


JOINERS = "\u200c\u200d"  # needed by some scripts and by emoji sequences in people's names


def hidden_characters(value: str, allow: str = "") -> list[str]:
    """Code points (``U+200B``) of invisible, control or bidirectional-control characters in ``value``."""
    found: list[str] = []
    for char in value:
        category = unicodedata.category(char)
        if char in "\n\r\t" or char in allow:
            continue  # line breaks have their own rule and message
        if category in {"Cf", "Cc", "Co", "Cs", "Cn", "Zl", "Zp"} or char in _BLANK_LOOKING:
            code = f"U+{ord(char):04X}"
            if code not in found:
                found.append(code)
    return found


def hidden_character_issues(path: str, value: str | None, *, allow: str = "") -> list[Issue]:
    if not value:
        return []
    found = hidden_characters(value, allow)
    if not found:
        return []
    return [
        Issue(
            path,
            "invisible_character",
            "must not contain invisible or bidirectional control characters (" + ", ".join(found) + ")",
        )
    ]


def scripts_of(value: str) -> set[str]:
    out: set[str] = set()
    for char in value:
        if not char.isalpha():
            continue
        name = unicodedata.name(char, "")
        for script in _SCRIPTS:
            if name.startswith(script):
                out.add(script)
    return out


def mixed_script_issues(path: str, value: str | None) -> list[Issue]:
    """Each word (or email part) in one script: Latin with Cyrillic or Greek is a lookalike."""
    if not value:
        return []
    for part in re.split(r"[\s@.\-_+]+", unicodedata.normalize("NFKC", value)):
        if len(scripts_of(part)) > 1:
            return [
                Issue(
                    path,
                    "mixed_script",
                    f"mixes Latin with Cyrillic or Greek letters in {part!r}, which reads like another name",
                )
            ]
    return []
