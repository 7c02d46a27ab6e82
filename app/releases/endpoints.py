from __future__ import annotations

from fastapi import APIRouter

from app.deps import AnalystKey, SessionDep
from app.errors import BudgetExhausted, Forbidden, NotFound, Unauthenticated, responses
from app.ids import DatasetId
from app.releases import service
from app.releases.schemas import ReleaseIn, ReleaseOut

router = APIRouter(tags=["releases"])


@router.post(
    "/datasets/{dataset_id}/releases",
    response_model=ReleaseOut,
    responses=responses(Unauthenticated, Forbidden, BudgetExhausted, NotFound),
    summary="Release mean and variance of every grid of a timeslot (Clip-User, 004 §V)",
)
def create_release(
    dataset_id: DatasetId, body: ReleaseIn, session: SessionDep, key: AnalystKey
) -> dict:
    return service.release_slot(session, key, dataset_id, body)
