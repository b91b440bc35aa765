"""Every table of the product on one metadata: importing this module registers them all.

Alembic's environment and the schema test read ``metadata`` from here. Alembic revisions under
``migrations/`` must match it; a test autogenerates against a migrated database and expects no
difference.
"""

from engine.directory import models as directory_models
from engine.platform import idempotency as idempotency_models
from engine.platform.tables import metadata
from engine.runs import approval_models
from engine.runs import models as run_models
from engine.worker import models as worker_models
from engine.workflows import models as workflow_models

__all__ = [
    "approval_models",
    "directory_models",
    "idempotency_models",
    "metadata",
    "run_models",
    "worker_models",
    "workflow_models",
]
