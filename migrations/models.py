"""Every model, imported once so ``Base.metadata`` is complete: the registry Alembic reads
(``migrations/env.py``), kept here beside it rather than in ``app.db``, which every
feature package imports."""

import re

from app.datasets.models import Dataset, DatasetUser, Grid, GridSnapshot, Record, Upload
from app.db.base import Base
from app.idempotency.models import IdempotentRequest
from app.instance.models import InstanceSettings
from app.keys.models import ApiKey
from app.ledger.models import BudgetAccount, BudgetReset, LedgerEntry
from app.queries.models import QueryAnswer
from app.releases.exports_store import ReleaseExport
from app.releases.models import SlotRelease

#: The partitions of ``records`` (``app.datasets.partitions``): made at run time, not
#: models of their own.
_RECORD_PARTITION = re.compile(r"records_d\d+(_m\d{6})?")


def include_name(name: str | None, type_: str, _parents: object) -> bool:
    """What Alembic compares: not the records' partitions (nor their indexes)."""
    return not (name and _RECORD_PARTITION.match(name) and type_ in ("table", "index"))


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
    "ReleaseExport",
    "SlotRelease",
    "Upload",
    "include_name",
]
