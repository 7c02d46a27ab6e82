from __future__ import annotations

import math
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Query, Request, Response

from app.deps import AnalystKey, SessionDep
from app.errors import (
    BudgetExhausted,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    Unauthenticated,
    responses,
)
from app.keys.service import KeyIdentity
from app.queries import service
from app.queries.schemas import QuoteOut, StatisticAnswer
from app.queries.store import open_store

router = APIRouter(tags=["queries"])

ERRORS = responses(Unauthenticated, Forbidden, BudgetExhausted, NotFound, Conflict)
EPSILON = Annotated[float, Query(description="Privacy budget of this query (0 < eps <= max).")]


def _options(request: Request) -> dict[str, str]:
    params = request.query_params
    repeated = [k for k in params if len(params.getlist(k)) > 1]
    if repeated:
        raise InvalidRequest(f"parameter given more than once: {', '.join(sorted(set(repeated)))}")
    return {k: v for k, v in params.items() if k not in service.RESERVED_PARAMS}


async def _answer(
    key: KeyIdentity,
    grid_id: str,
    statistic: str,
    mechanism: str,
    epsilon: float,
    request: Request,
) -> Response:
    """The whole query, commit included (``app.queries.store`` says where each step runs).

    The answer is built field by field by ``service.answer_body`` (tested against
    ``StatisticAnswer``), so it is sent as it is rather than validated again (orjson).
    """
    options = _options(request)
    async with open_store(request.app.state) as store:
        answer = await service.answer_statistic(
            store, key, grid_id, statistic, mechanism, epsilon, options
        )
    return Response(orjson.dumps(answer), media_type="application/json")


@router.get(
    "/grids/{grid_id}/mean",
    response_model=StatisticAnswer,
    responses=ERRORS,
    summary="DP mean of one grid",
    description="Mechanisms: baseline, array_avg_wrap, array_avg_bestfit, levy, quantile_fixed, "
    "quantile_optimized, opt_array, opt_array_convex, clip, worst_case_optimal, auto "
    "(SPEC §5). Mechanism options are further query parameters; unknown ones are refused.",
)
async def mean(
    grid_id: str,
    request: Request,
    key: AnalystKey,
    epsilon: EPSILON,
    mechanism: str = "auto",
) -> Response:
    return await _answer(key, grid_id, "mean", mechanism, epsilon, request)


@router.get(
    "/grids/{grid_id}/variance",
    response_model=StatisticAnswer,
    responses=ERRORS,
    summary="DP population variance of one grid",
    description="Mechanisms: baseline, clip, auto (004 Prop III.1, Lemma III.3).",
)
async def variance(
    grid_id: str,
    request: Request,
    key: AnalystKey,
    epsilon: EPSILON,
    mechanism: str = "auto",
) -> Response:
    return await _answer(key, grid_id, "variance", mechanism, epsilon, request)


@router.get(
    "/grids/{grid_id}/quote",
    response_model=QuoteOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="Smallest epsilon reaching a worst-case error (public counts only; free)",
)
def quote(
    grid_id: str,
    session: SessionDep,
    _: AnalystKey,
    target_error: Annotated[float, Query(gt=0)],
    statistic: Literal["mean", "variance"] = "mean",
) -> dict:
    if not math.isfinite(target_error):
        raise InvalidRequest("target_error must be a finite number > 0")
    return service.quote(session, grid_id, statistic, target_error)
