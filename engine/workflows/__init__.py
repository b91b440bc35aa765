"""Workflows: the definition contract (``definitions/``), workflows and their revisions, staging,
approval and publication. It may use the directory; it never imports ``engine.runs``."""
