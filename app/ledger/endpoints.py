from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response

from app.datasets.service import get_dataset
from app.deps import AdminKey, AnalystKey, SessionDep
from app.errors import (
    Conflict,
    Forbidden,
    IdempotencyConflict,
    NotFound,
    Unauthenticated,
    responses,
)
from app.idempotency.service import RequestIdentity, json_body_sha256, run_idempotent
from app.ids import DatasetId
from app.ledger import service
from app.ledger.schemas import BudgetOut, LedgerOut, ResetIn, ResetOut
from app.query_params import CheckedRoute

router = APIRouter(tags=["budget"], route_class=CheckedRoute)


@router.get(
    "/datasets/{dataset_id}/budget",
    response_model=BudgetOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="Budget state of a dataset's current epoch",
)
def get_budget(dataset_id: DatasetId, session: SessionDep, _: AnalystKey) -> dict:
    return service.budget_summary(session, get_dataset(session, dataset_id))


@router.get(
    "/datasets/{dataset_id}/ledger",
    response_model=LedgerOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="Per-user spend, users shown by their keyed hash (admin)",
)
def get_ledger(
    dataset_id: DatasetId,
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
    responses=responses(Unauthenticated, Forbidden, NotFound, Conflict, IdempotencyConflict),
    summary="Open a new budget epoch (admin; old entries are kept and the reset audited)",
    description="With `Idempotency-Key`, a retry of the same request returns the first "
    "answer's epoch and resets nothing; the key reused with a different request is refused "
    "(422 `idempotency_conflict`).",
)
def reset_budget(
    dataset_id: DatasetId,
    body: ResetIn,
    request: Request,
    response: Response,
    session: SessionDep,
    key: AdminKey,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200)
    ] = None,
) -> ResetOut:
    dataset = get_dataset(session, dataset_id)
    service.lock_for_reset(session, dataset.id)  # before the key's look-up
    answer, replayed = run_idempotent(
        session,
        f"reset:{dataset.id}",
        idempotency_key,
        RequestIdentity.of(request).digest(json_body_sha256(body.model_dump())),
        lambda: {
            "epoch": service.reset_budget(session, dataset, key_id=key.id, reason=body.reason)
        },
    )
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return ResetOut(**answer)
