"""A policy change names only extensions the product knows (engine/directory/policy.py), refused
before anything is read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.directory.audit import Actor
from engine.directory.policy import update_policy


def test_an_unknown_extension_is_refused_before_the_database_is_asked() -> None:
    actor = Actor.system("rlm_x")
    nothing: Any = None  # no session: the refusal comes first
    with pytest.raises(ValueError, match=r"unknown policy extensions: \['auto_publish'\]"):
        asyncio.run(update_policy(nothing, actor, {"auto_publish": True, "workflow_publish_approval": True}))
