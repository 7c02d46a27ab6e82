"""``POST /map/cells``: the boundaries of H3 cells, for the map's footprint.

Pure geometry (h3's ``cell_to_boundary``): no data, nothing charged. A key is asked for
as everywhere (the map has one), so no stranger spends the server's time. The map asks
for the cells of a slot's public occupancy (``GET /datasets/{id}/grids``), which the
release's GeoJSON does not carry, so the page needs no H3 code of its own.
"""

from __future__ import annotations

from typing import Annotated

import h3
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.http.deps import AnalystKey
from app.http.query_params import CheckedRoute
from app.kit.errors import Forbidden, InvalidRequest, Unauthenticated, responses

MAX_CELLS = 20_000

router = APIRouter(tags=["map"], route_class=CheckedRoute)

CellId = Annotated[str, StringConstraints(min_length=1, max_length=16)]


class CellsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cells: list[CellId] = Field(
        max_length=MAX_CELLS, description="H3 cell ids (hexadecimal), at most 20 000."
    )


class CellsOut(BaseModel):
    cells: dict[str, list[list[float]]] = Field(
        description="Each cell's boundary as a closed ring of [lon, lat] points."
    )


def boundary(cell: str) -> list[list[float]]:
    """The cell's outer ring, lon/lat, closed (first point repeated)."""
    ring = [[lon, lat] for lat, lon in h3.cell_to_boundary(cell)]
    return [*ring, ring[0]]


@router.post(
    "/map/cells",
    response_model=CellsOut,
    responses=responses(Unauthenticated, Forbidden, InvalidRequest),
    summary="Boundaries of H3 cells (geometry only, nothing charged)",
    description="Used by `/map` to draw a slot's occupied footprint. Every id must be a "
    "valid H3 cell; an invalid one is refused with 400 naming it.",
)
def cell_boundaries(body: CellsIn, _: AnalystKey) -> CellsOut:
    bad = [c for c in body.cells if not h3.is_valid_cell(c)]
    if bad:
        shown = ", ".join(repr(c) for c in bad[:5])
        raise InvalidRequest(f"not H3 cell ids: {shown}{' …' if len(bad) > 5 else ''}")
    return CellsOut(cells={c: boundary(c) for c in dict.fromkeys(body.cells)})
