from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from app.answers.schemas import StatisticAnswer
from app.http.deps import AnalystKey, SessionDep
from app.http.query_params import CheckedRoute
from app.keys.service import KeyIdentity
from app.kit.errors import (
    BudgetExhausted,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    Unauthenticated,
    responses,
)
from app.observability.metrics import record_answer
from app.queries import listing, service
from app.queries.openapi import mechanism_description, mechanism_schema, option_parameters
from app.queries.schemas import QuoteOut, StoredAnswerList
from app.queries.store import open_store

router = APIRouter(tags=["queries"], route_class=CheckedRoute)

ERRORS = responses(Unauthenticated, Forbidden, BudgetExhausted, NotFound, Conflict)
_EPSILON_TEXT = (
    "Privacy loss of this query, charged to every user whose records it uses: a finite "
    "number with 0 < epsilon <= the dataset's `max_epsilon_per_query`. Smaller is more "
    "private and noisier."
)
GRID_ID = Annotated[
    str,
    Path(description="A grid's `grid_id`, from `GET /datasets/{dataset_id}/grids`."),
]
_OPTIONS_NOTE = (
    "\n\nMechanism options are further query parameters (each says which mechanisms read "
    "it); an option the chosen mechanism does not read, or any undeclared parameter, is "
    "refused with 400. The same query (grid, statistic, mechanism, epsilon, options) asked "
    "again in the same budget epoch returns the stored answer with `cached: true` and "
    "charges nothing."
)


def _query_parameters(statistic: str, mechanism_note: str) -> list[dict[str, Any]]:
    """``epsilon`` and ``mechanism`` as OpenAPI parameters (what a declared ``Query`` would
    say), then the mechanisms' options: all of them read by :func:`_read_query` alone."""
    mechanism = {"type": "string", "description": mechanism_note, **mechanism_schema(statistic)}
    return [
        {
            "name": "epsilon",
            "in": "query",
            "required": True,
            "schema": {"type": "number", "description": _EPSILON_TEXT, "title": "Epsilon"},
            "description": _EPSILON_TEXT,
        },
        {
            "name": "mechanism",
            "in": "query",
            "required": False,
            "schema": {**mechanism, "default": "auto", "title": "Mechanism"},
            "description": mechanism_note,
        },
        *option_parameters(statistic),
    ]


_FLOAT = TypeAdapter(float)  # a query string's number, read as FastAPI reads a float Query


def _epsilon(raw: str | None) -> float:
    """``epsilon`` as a float, or the 400 FastAPI's own validation gave (same message)."""
    if raw is None:
        error = {"type": "missing", "loc": ("query", "epsilon"), "msg": "Field required"}
        raise RequestValidationError([{**error, "input": None}])
    try:
        return _FLOAT.validate_python(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("query", "epsilon")} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def _read_query(request: Request) -> tuple[float, str, dict[str, str]]:
    """The query string, read once: ``epsilon`` (checked further by
    ``app.answers.epsilon``), ``mechanism`` and the options (checked by the registry)."""
    params = request.query_params
    epsilon = _epsilon(params.get("epsilon"))
    if len(params) != len(params.multi_items()):
        repeated = sorted({k for k in params if len(params.getlist(k)) > 1})
        raise InvalidRequest(f"parameter given more than once: {', '.join(repeated)}")
    options = {k: v for k, v in params.items() if k not in service.RESERVED_PARAMS}
    return epsilon, params.get("mechanism", "auto"), options


async def _answer(key: KeyIdentity, grid_id: str, statistic: str, request: Request) -> Response:
    """The whole query, commit included (``app.queries.store`` says where each step runs).

    The answer is built field by field by ``app.answers.body.answer_body`` (tested against
    ``StatisticAnswer``), so it is sent as it is rather than validated again (orjson).
    """
    epsilon, mechanism, options = _read_query(request)
    async with open_store(request.app.state) as store:
        answer = await service.answer_statistic(
            store, key, grid_id, statistic, mechanism, epsilon, options
        )
    record_answer(statistic, answer["mechanism"], bool(answer["cached"]))
    return Response(orjson.dumps(answer), media_type="application/json")


def _statistic_route(statistic: str, summary: str, lead: str, mechanism_note: str) -> None:
    """``GET /grids/{grid_id}/<statistic>``: one handler shape for every statistic, its
    OpenAPI text from ``lead`` and the statistic's mechanisms."""

    async def handler(grid_id: GRID_ID, request: Request, key: AnalystKey) -> Response:
        return await _answer(key, grid_id, statistic, request)

    router.get(
        f"/grids/{{grid_id}}/{statistic}",
        name=statistic,
        response_model=StatisticAnswer,
        responses=ERRORS,
        summary=summary,
        description=lead + "Mechanisms:\n\n" + mechanism_description(statistic) + _OPTIONS_NOTE,
        openapi_extra={"parameters": _query_parameters(statistic, mechanism_note)},
    )(handler)


_CHOSEN = "The mechanism; `auto` chooses one and the answer says which ran."
_statistic_route(
    "mean", "DP mean of one grid", "The user-level ε-DP mean of the grid's values. ", _CHOSEN
)
_statistic_route(
    "variance",
    "DP population variance of one grid",
    "The user-level ε-DP population variance of the grid's values. ",
    _CHOSEN,
)
_statistic_route(
    "user_mean",
    "DP mean over the grid's privacy units of each unit's own mean",
    "The user-level ε-DP mean over the grid's privacy units (users, or user-windows on a "
    "dataset with a budget window) of each unit's own mean value: every unit counts once, "
    "however many records it has. Range [0, U]; the Laplace noise's scale is U/(L·epsilon) "
    "for L units (docs/math.md §13), and every answer carries an honest ci95. ",
    "The mechanism; `auto` (the Laplace mean of unit means) and the answer says which ran.",
)


@router.get(
    "/grids/{grid_id}/quote",
    response_model=QuoteOut,
    responses=responses(Unauthenticated, Forbidden, NotFound),
    summary="Smallest epsilon reaching a worst-case error (public counts only; free)",
)
def quote(
    grid_id: GRID_ID,
    _: AnalystKey,
    session: SessionDep,
    target_error: Annotated[
        float,
        Query(
            gt=0,
            description="The worst-case error wanted (`worst_case_error` of the answer), in "
            "the values' unit for a mean and their unit squared for a variance.",
        ),
    ],
    statistic: Annotated[
        Literal["mean", "variance"], Query(description="The statistic to quote.")
    ] = "mean",
) -> dict:
    if not math.isfinite(target_error):
        raise InvalidRequest(f"target_error must be a finite number > 0 (sent {target_error})")
    return service.quote(session, grid_id, statistic, target_error)


@router.get(
    "/queries",
    response_model=StoredAnswerList,
    responses=responses(Unauthenticated, Forbidden),
    summary="Your stored answers, newest first (re-reading them is free)",
    description="The answers this key obtained from `/grids/{grid_id}/mean`, `/variance` "
    "and `/user_mean`, "
    "each with the stored answer itself. `reusable` says whether the same query asked "
    "again now would return it for free.",
)
def list_queries(
    key: AnalystKey,
    session: SessionDep,
    grid_id: Annotated[
        str | None, Query(max_length=32, description="Only the answers about this grid.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Answers per page.")] = 100,
    offset: Annotated[
        int, Query(ge=0, le=2**31 - 1, description="Skip this many (`next` of a page).")
    ] = 0,
) -> StoredAnswerList:
    return listing.list_stored_answers(session, key.id, grid_id=grid_id, limit=limit, offset=offset)
