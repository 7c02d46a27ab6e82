"""Every model, imported once so ``Base.metadata`` is complete: the registry Alembic reads
(``migrations/env.py``), kept here beside it rather than in ``app.db``, which every
feature package imports."""

from app.datasets.models import Dataset, DatasetUser, Grid, GridSnapshot, Record, Upload
from app.db.base import Base
from app.idempotency.models import IdempotentRequest
from app.instance.models import InstanceSettings
from app.keys.models import ApiKey
from app.ledger.models import BudgetAccount, BudgetReset, LedgerEntry
from app.queries.models import QueryAnswer
from app.releases.models import SlotRelease

__all__ = [
    "ApiKey",
    "Base",
    "BudgetAccount",
    "BudgetReset",
    "Dataset",
    "DatasetUser",
    "Grid",
    "GridSnapshot",
    "IdempotentRequest",
    "InstanceSettings",
    "LedgerEntry",
    "QueryAnswer",
    "Record",
    "SlotRelease",
    "Upload",
]
