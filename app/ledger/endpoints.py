from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response

from app.datasets.service import get_dataset
from app.http.deps import AdminKey, ReaderKey, SessionDep
from app.http.query_params import CheckedRoute
from app.idempotency.service import RequestIdentity, json_body_sha256, run_idempotent
from app.kit.errors import (
    Conflict,
    Forbidden,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    Unauthenticated,
    responses,
)
from app.kit.ids import DatasetId
from app.ledger import service
from app.ledger.schemas import BudgetOut, LedgerOut, ResetIn, ResetOut

router = APIRouter(tags=["budget"], route_class=CheckedRoute)

WINDOW = Annotated[
    str | None,
    Query(
        max_length=40,
        description="For a dataset with a budget window (`day`, `week`, `month`): a date "
        "in the window to show, local to the dataset (e.g. `2016-11-25`; an ISO 8601 "
        "instant is read as its local date). Without it, the window where some user has "
        "spent the most in the epoch (the latest of ties), or today's local window when "
        "nobody was charged; the answer's `window` says which. Refused (400) for a dataset "
        "without windows.",
    ),
]


@router.get(
    "/datasets/{dataset_id}/budget",
    response_model=BudgetOut,
    responses=responses(InvalidRequest, Unauthenticated, Forbidden, NotFound),
    summary="Budget state of a dataset's current epoch (one budget window of it)",
    description="How much of `budget_per_user` the users have spent in the current epoch "
    "and, for a dataset with a budget window, in one window of the data's time (`window`).",
)
def get_budget(
    dataset_id: DatasetId,
    _: ReaderKey,
    session: SessionDep,
    window: WINDOW = None,
) -> dict:
    dataset = get_dataset(session, dataset_id)
    shown = service.parse_window_param(dataset, window)
    return service.budget_summary(session, dataset, window=shown)


@router.get(
    "/datasets/{dataset_id}/ledger",
    response_model=LedgerOut,
    responses=responses(InvalidRequest, Unauthenticated, Forbidden, NotFound),
    summary="Per-user spend, users shown by their keyed hash (admin)",
)
def get_ledger(
    dataset_id: DatasetId,
    _: AdminKey,
    session: SessionDep,
    epoch: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    window: WINDOW = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> dict:
    dataset = get_dataset(session, dataset_id)
    shown = service.parse_window_param(dataset, window)
    return service.ledger_page(
        session, dataset, epoch=epoch, window=shown, limit=limit, offset=offset
    )


@router.post(
    "/datasets/{dataset_id}/budget/reset",
    response_model=ResetOut,
    responses=responses(Unauthenticated, Forbidden, NotFound, Conflict, IdempotencyConflict),
    summary="Open a new budget epoch (admin; old entries are kept and the reset audited)",
    description="The new epoch starts every budget window afresh. With `Idempotency-Key`, "
    "a retry of the same request returns the first "
    "answer's epoch and resets nothing; the key reused with a different request is refused "
    "(422 `idempotency_conflict`).",
)
def reset_budget(
    dataset_id: DatasetId,
    body: ResetIn,
    request: Request,
    response: Response,
    key: AdminKey,
    session: SessionDep,
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
