"""``dpgate.Client``: the dpgate API from Python (httpx), with typed answers and errors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from dpgate.errors import DpgateError, error_from_response
from dpgate.models import (
    Budget,
    Dataset,
    Grid,
    KeyInfo,
    Quote,
    Release,
    ReleasePreview,
    ReleaseSummary,
    StatisticAnswer,
    StoredAnswer,
    UploadResult,
)

__all__ = ["Client"]

M = TypeVar("M", bound=BaseModel)
_RETRY_STATUSES = frozenset({503})


def _query_value(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


def _params(values: Mapping[str, Any]) -> dict[str, Any]:
    """Query parameters without the unset ones, booleans as ``true``/``false``."""
    return {k: _query_value(v) for k, v in values.items() if v is not None}


class Client:
    """A dpgate server at ``base_url``, called with the API key ``key`` (None: no key, for
    public releases and the public listing only).

    Every error answer raises its :class:`dpgate.DpgateError` subclass. A 503
    (``unavailable``) is retried up to ``max_retries`` times after its ``Retry-After``
    (at most ``max_retry_wait`` seconds each). Uploads and releases carry an
    ``Idempotency-Key``, one per call, sent again unchanged on each retry.
    """

    def __init__(
        self,
        base_url: str,
        key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={
                "User-Agent": "dpgate-python",
                **({} if key is None else {"Authorization": f"Bearer {key}"}),
            },
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ---- transport -------------------------------------------------------------------------

    def _retry_wait(self, response: httpx.Response, attempt: int) -> float:
        header = response.headers.get("Retry-After", "")
        try:
            wait = float(header)
        except ValueError:
            wait = min(2.0**attempt, 8.0)
        return max(0.0, min(wait, self.max_retry_wait))

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent_key: bool | str = False,
    ) -> Any:
        """Send one logical request (retried on 503); its JSON answer or a typed error."""
        response = self._send(
            method,
            path,
            params=params,
            json=json,
            content=content,
            headers=headers,
            idempotent_key=idempotent_key,
        )
        return self._answer(response)

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent_key: bool | str = False,
    ) -> httpx.Response:
        """The final response of one logical request: 503s are retried (bounded), with the
        same ``Idempotency-Key`` (one per logical request) on every attempt."""
        sent_headers = dict(headers or {})
        if idempotent_key:
            given = idempotent_key if isinstance(idempotent_key, str) else None
            sent_headers["Idempotency-Key"] = given or uuid.uuid4().hex
        attempt = 0
        while True:
            response = self._http.request(
                method,
                path,
                params=_params(params or {}),
                json=json,
                content=content,
                headers=sent_headers,
            )
            if response.status_code not in _RETRY_STATUSES or attempt >= self.max_retries:
                return response
            time.sleep(self._retry_wait(response, attempt))
            attempt += 1

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise error_from_response(response.status_code, body, response.text)
        if body is None and response.status_code != 204:
            raise DpgateError(
                f"expected a JSON answer, got {response.headers.get('content-type')!r}",
                status=response.status_code,
                code="bad_answer",
            )
        return body

    def _get(self, model: type[M], path: str, **params: Any) -> M:
        return model.model_validate(self.request("GET", path, params=params))

    def _pages(self, path: str, field: str, params: Mapping[str, Any]) -> Iterator[Any]:
        offset: int | None = int(params.get("offset") or 0)
        while offset is not None:
            page = self.request("GET", path, params={**params, "offset": offset})
            yield from page[field]
            nxt = page.get("next")
            offset = None if nxt is None or nxt <= offset else int(nxt)

    # ---- the API -----------------------------------------------------------------------------

    def datasets(self) -> list[Dataset]:
        body = self.request("GET", "/datasets")
        return [Dataset.model_validate(d) for d in body["datasets"]]

    def grids(self, dataset_id: int | str, **filters: Any) -> list[Grid]:
        """Every grid of the dataset matching ``filters`` (``min_users``, ``sort``,
        ``h3_cell``, ``slot_start``, ``h3_resolution``, ``slot_minutes``, ``limit`` per
        page…), all pages followed."""
        path = f"/datasets/{dataset_id}/grids"
        return [Grid.model_validate(g) for g in self._pages(path, "grids", filters)]

    def mean(
        self, grid_id: str, epsilon: float, mechanism: str = "auto", **options: Any
    ) -> StatisticAnswer:
        """A DP mean (charged, unless the same query was answered before: ``cached``)."""
        return self._statistic("mean", grid_id, epsilon, mechanism, options)

    def variance(
        self, grid_id: str, epsilon: float, mechanism: str = "auto", **options: Any
    ) -> StatisticAnswer:
        """A DP population variance (charged, unless ``cached``)."""
        return self._statistic("variance", grid_id, epsilon, mechanism, options)

    def user_mean(
        self, grid_id: str, epsilon: float, mechanism: str = "auto", **options: Any
    ) -> StatisticAnswer:
        """A DP mean over the grid's privacy units of each unit's own mean: every unit
        counts once, however many records it has (charged, unless ``cached``)."""
        return self._statistic("user_mean", grid_id, epsilon, mechanism, options)

    def _statistic(
        self, statistic: str, grid_id: str, epsilon: float, mechanism: str, options: Any
    ) -> StatisticAnswer:
        params = {**options, "epsilon": epsilon, "mechanism": mechanism}
        return self._get(StatisticAnswer, f"/grids/{grid_id}/{statistic}", **params)

    def quote(self, grid_id: str, target_error: float, statistic: str = "mean") -> Quote:
        """The smallest epsilon reaching ``target_error`` (free: public counts only)."""
        return self._get(
            Quote, f"/grids/{grid_id}/quote", target_error=target_error, statistic=statistic
        )

    def release(self, dataset_id: int | str, slot_start: str, **fields: Any) -> Release:
        """Release every grid of a timeslot (``epsilon`` or ``max_user_cost``, ``min_users``,
        ``statistics``, ``mechanism``, ``clip_user``…); sent with an Idempotency-Key."""
        body = {"slot_start": slot_start, **{k: v for k, v in fields.items() if v is not None}}
        answer = self.request(
            "POST", f"/datasets/{dataset_id}/releases", json=body, idempotent_key=True
        )
        return Release.model_validate(answer)

    def release_preview(
        self, dataset_id: int | str, slot_start: str, **fields: Any
    ) -> ReleasePreview:
        """The plan of :meth:`release` without values and without any charge."""
        body = {"slot_start": slot_start, **{k: v for k, v in fields.items() if v is not None}}
        answer = self.request("POST", f"/datasets/{dataset_id}/releases/preview", json=body)
        return ReleasePreview.model_validate(answer)

    def get_release(self, release_id: str) -> Release:
        """A stored release (JSON; a public one needs no key). For the other formats see
        :meth:`release_file`."""
        return self._get(Release, f"/releases/{release_id}")

    def releases(self, dataset_id: int | str, **filters: Any) -> list[ReleaseSummary]:
        """The dataset's releases, newest first (all pages; ``limit`` per page)."""
        path = f"/datasets/{dataset_id}/releases"
        return [ReleaseSummary.model_validate(r) for r in self._pages(path, "releases", filters)]

    def public_releases(
        self, dataset_id: int | str | None = None, **filters: Any
    ) -> list[ReleaseSummary]:
        """Every public release (of one dataset, or all), newest first: no key needed."""
        pages = self._pages("/public/releases", "releases", {"dataset": dataset_id, **filters})
        return [ReleaseSummary.model_validate(r) for r in pages]

    def release_file(self, release_id: str, format: str = "geojson") -> str:
        """A stored release as GeoJSON, CSV or a Data Package's JSON text."""
        response = self._send("GET", f"/releases/{release_id}", params={"format": format})
        if response.status_code >= 400:
            self._answer(response)  # raises the typed error
        return response.text

    def set_public(self, release_id: str, public: bool = True) -> dict[str, Any]:
        """Make a release public (read by anyone without a key) or private again (admin;
        spends nothing)."""
        answer: dict[str, Any] = self.request(
            "PATCH", f"/releases/{release_id}", json={"public": public}
        )
        return answer

    def budget(self, dataset_id: int | str, window: str | None = None) -> Budget:
        """The budget state; ``window`` (a local date) picks a budget window."""
        params = {} if window is None else {"window": window}
        return self._get(Budget, f"/datasets/{dataset_id}/budget", **params)

    def me(self) -> KeyInfo:
        """This key: its role, quota, spent and remaining epsilon."""
        return self._get(KeyInfo, "/keys/me")

    def queries(self, **filters: Any) -> list[StoredAnswer]:
        """This key's stored answers, newest first (all pages; ``grid_id`` filters)."""
        return [StoredAnswer.model_validate(q) for q in self._pages("/queries", "queries", filters)]

    # ---- admin -------------------------------------------------------------------------------

    def create_dataset(self, **fields: Any) -> Dataset:
        return Dataset.model_validate(self.request("POST", "/datasets", json=fields))

    def create_key(
        self, name: str, role: str = "analyst", epsilon_quota: float | None = None
    ) -> dict[str, Any]:
        """A new key: ``{"id", "key", "role"}`` (the secret ``key`` is shown once). Roles:
        ``admin``, ``analyst``, ``viewer`` (reads everything, never spends)."""
        body = {"name": name, "role": role, "epsilon_quota": epsilon_quota}
        answer: dict[str, Any] = self.request("POST", "/keys", json=body)
        return answer

    def reset_budget(self, dataset_id: int | str, reason: str) -> int:
        """Open a new budget epoch of the dataset (admin; recorded with ``reason``); the
        new epoch. Sent with an Idempotency-Key, so a retry resets once."""
        answer = self.request(
            "POST",
            f"/datasets/{dataset_id}/budget/reset",
            json={"reason": reason},
            idempotent_key=True,
        )
        return int(answer["epoch"])

    def upload(
        self, dataset_id: int | str, data: bytes | str | Path, **options: Any
    ) -> UploadResult:
        """Upload CSV records (bytes, text or a file path); sent with an Idempotency-Key,
        so a retry after a lost answer writes nothing twice."""
        content = (
            data.read_bytes() if isinstance(data, Path)
            else data.encode() if isinstance(data, str) else data
        )  # fmt: skip
        answer = self.request(
            "POST",
            f"/datasets/{dataset_id}/records",
            params=options,
            content=content,
            headers={"Content-Type": "text/csv"},
            idempotent_key=True,
        )
        return UploadResult.model_validate(answer)
