"""A read model's class name is its schema's name in the OpenAPI document: two read models of one
name would make two schemas fight for it, so every name is declared once across the engine and the
API."""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict

import cockpit.api
import engine
from engine.platform.read_models import Shape


def every_shape() -> list[type[Shape]]:
    for package in (engine, cockpit.api):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
    found: list[type[Shape]] = []
    todo = list(Shape.__subclasses__())
    while todo:
        shape = todo.pop()
        found.append(shape)
        todo.extend(shape.__subclasses__())
    return found


def test_every_read_model_name_is_declared_once() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for shape in every_shape():
        by_name[shape.__name__].append(shape.__module__)
    assert len(by_name) > 50  # the API's answers are among them
    assert {name: modules for name, modules in by_name.items() if len(modules) > 1} == {}
