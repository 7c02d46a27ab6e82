from __future__ import annotations

from fastapi import APIRouter

from app.deps import AnalystKey
from app.errors import Forbidden, Unauthenticated, responses
from app.plans import service
from app.plans.schemas import PreviewIn, PreviewOut
from app.query_params import CheckedRoute

router = APIRouter(tags=["plans"], route_class=CheckedRoute)


@router.post(
    "/plans/preview",
    response_model=PreviewOut,
    responses=responses(Unauthenticated, Forbidden),
    summary="Preview a Clip-User plan on a public occupancy (charges nothing)",
)
def preview(body: PreviewIn, _: AnalystKey) -> dict:
    return service.preview(body)
