from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from app.datasets import service
from app.datasets.schemas import DatasetCreate, DatasetDetail, DatasetList, DatasetOut, GridList
from app.http.deps import AdminKey, ReaderKey, SessionDep
from app.http.query_params import CheckedRoute
from app.kit.errors import Forbidden, InvalidRequest, NotFound, Unauthenticated, responses
from app.kit.ids import DatasetId

router = APIRouter(tags=["datasets"], route_class=CheckedRoute)


@router.post(
    "/datasets",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetOut,
    responses=responses(Unauthenticated, Forbidden),
    summary="Create a dataset (admin)",
)
def create_dataset(body: DatasetCreate, _: AdminKey, session: SessionDep) -> DatasetOut:
    return service.dataset_out(service.create_dataset(session, body))


@router.get(
    "/datasets",
    response_model=DatasetList,
    responses=responses(Unauthenticated, Forbidden),
    summary="List datasets",
)
def list_datasets(_: ReaderKey, session: SessionDep) -> DatasetList:
    return DatasetList(datasets=[service.dataset_out(d) for d in service.list_datasets(session)])


@router.get(
    "/datasets/{dataset_id}",
    response_model=DatasetDetail,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="One dataset, with its user, grid and record counts",
)
def get_dataset(dataset_id: DatasetId, _: ReaderKey, session: SessionDep) -> DatasetDetail:
    return service.dataset_detail(session, service.get_dataset(session, dataset_id))


@router.get(
    "/datasets/{dataset_id}/grids",
    response_model=GridList,
    responses=responses(Unauthenticated, Forbidden, NotFound, InvalidRequest),
    summary="List a dataset's grids (H3 cell × timeslot) with their public occupancy",
    description="The dataset's own grids, or with `h3_resolution` / `slot_minutes` coarser "
    "grids made on demand from the stored records (their `grid_id` works on every "
    "`/grids/{grid_id}/…` endpoint). Unknown query parameters are refused with 400.",
)
def list_grids(
    dataset_id: DatasetId,
    _: ReaderKey,
    session: SessionDep,
    slot_start: Annotated[
        str | None,
        Query(max_length=64, description="Only this slot (any ISO 8601 form; naive = local)."),
    ] = None,
    h3_cell: Annotated[str | None, Query(max_length=16, description="Only this cell.")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: Annotated[
        int,
        Query(
            ge=0,
            le=service.MAX_LISTING_OFFSET,
            description="Grids to skip. A page costs its own rows plus a scan of the index "
            f"entries skipped, so at most {service.MAX_LISTING_OFFSET:,}: list a longer "
            "dataset a slot at a time (`slot_start`).",
        ),
    ] = 0,
    min_users: Annotated[
        int, Query(ge=0, le=2**31 - 1, description="Only grids with at least this many users.")
    ] = 0,
    sort: Annotated[
        service.GridSort | None,
        Query(description="Order by users or slot start (`-` descending); default (slot, cell)."),
    ] = None,
    h3_resolution: Annotated[
        int | None,
        Query(ge=0, le=15, description="List coarser grids: H3 parent cells at this resolution."),
    ] = None,
    slot_minutes: Annotated[
        int | None,
        Query(
            ge=1,
            le=1440,
            description="List coarser grids: slots of this length (a multiple of the dataset's "
            "that divides 1440), aligned to local midnight.",
        ),
    ] = None,
) -> GridList:
    dataset = service.get_dataset(session, dataset_id)
    return service.list_grids(
        session,
        dataset,
        slot_start=slot_start,
        h3_cell=h3_cell,
        limit=limit,
        offset=offset,
        min_users=min_users,
        sort=sort,
        h3_resolution=h3_resolution,
        slot_minutes=slot_minutes,
    )
