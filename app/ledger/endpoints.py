from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.datasets.service import get_dataset
from app.deps import AdminKey, AnalystKey, SessionDep
from app.errors import Forbidden, NotFound, Unauthenticated, responses
from app.ledger import service
from app.ledger.schemas import BudgetOut, LedgerOut, ResetIn, ResetOut

router = APIRouter(tags=["budget"])


@router.get(
    "/datasets/{dataset_id}/budget",
    response_model=BudgetOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="Budget state of a dataset's current epoch",
)
def get_budget(dataset_id: int, session: SessionDep, _: AnalystKey) -> dict:
    return service.budget_summary(session, get_dataset(session, dataset_id))


@router.get(
    "/datasets/{dataset_id}/ledger",
    response_model=LedgerOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="Per-user spend, users shown by their keyed hash (admin)",
)
def get_ledger(
    dataset_id: int,
    session: SessionDep,
    _: AdminKey,
    epoch: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> dict:
    dataset = get_dataset(session, dataset_id)
    return service.ledger_page(session, dataset, epoch=epoch, limit=limit, offset=offset)


@router.post(
    "/datasets/{dataset_id}/budget/reset",
    response_model=ResetOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="Open a new budget epoch (admin; old entries are kept and the reset audited)",
)
def reset_budget(dataset_id: int, body: ResetIn, session: SessionDep, key: AdminKey) -> ResetOut:
    dataset = get_dataset(session, dataset_id)
    return ResetOut(epoch=service.reset_budget(session, dataset, key_id=key.id, reason=body.reason))
