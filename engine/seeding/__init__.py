"""What a fresh installation starts with: the demo realm and its onboarding workflow.

A package of its own, above ``runs``: the demo realm is directory data, but its workflow is
published and its first runs are started and approved through the runs layer, and both are
seeded in one transaction by ``cockpit up``. Nothing in the engine imports it; the cockpit's
first start (``cockpit/bootstrap.py``) and the tests do.
"""
