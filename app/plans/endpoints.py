from __future__ import annotations

from fastapi import APIRouter

from app.http.deps import AnalystKey
from app.http.query_params import CheckedRoute
from app.kit.errors import Forbidden, Unauthenticated, responses
from app.plans import service
from app.plans.schemas import PreviewIn, PreviewOut

router = APIRouter(tags=["plans"], route_class=CheckedRoute)


@router.post(
    "/plans/preview",
    response_model=PreviewOut,
    responses=responses(Unauthenticated, Forbidden),
    summary="Preview a Clip-User plan on a public occupancy (charges nothing)",
)
def preview(body: PreviewIn, _: AnalystKey) -> dict:
    return service.preview(body)
