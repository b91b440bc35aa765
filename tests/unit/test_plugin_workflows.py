"""A workflow a plugin installed is changed only through its plugin (409 ``plugin_managed``)."""

from __future__ import annotations

import pytest

from engine.platform.errors import Conflict
from engine.workflows.lookup import refuse_plugin_managed
from engine.workflows.models import Workflow


def test_a_plugins_workflow_is_refused_naming_the_plugin_and_the_verb() -> None:
    with pytest.raises(Conflict) as refused:
        refuse_plugin_managed(Workflow(id="wfl_1", realm_id="rlm_1", name="W", plugin_id="acme"), "disable")
    assert refused.value.code == "plugin_managed"
    assert refused.value.detail == "This workflow was installed by the plugin acme; disable it through the plugin."
    refuse_plugin_managed(Workflow(id="wfl_2", realm_id="rlm_1", name="W"), "disable")
