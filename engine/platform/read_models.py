"""The base of the engine's read models: what the engine answers, in the shape the API sends and
the pages show.

Each area declares its read models beside the functions that build them
(``engine/<area>/read_models.py``), as :class:`Shape` structs; the JSON API returns them as they
are, so the OpenAPI document and the bytes on the wire come from that one declaration. A struct's
class name is its schema's name in the OpenAPI document: names are unique across the engine
(``tests/unit/test_read_model_names.py``). Members that an answer carries only sometimes default to
``msgspec.UNSET`` and are left out when absent.
"""

from __future__ import annotations

import msgspec


class Shape(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every read model: a member the struct does not declare is an error, never dropped."""
