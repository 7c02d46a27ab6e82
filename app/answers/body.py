"""The API.md statistic answer (``StatisticAnswer``, built field by field): of one release
(a query) or of every row of a release batch (a slot release), by the same function."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from app import core
from app.answers.epsilon import EpsilonAmount
from app.core.engine.batch import plain_details
from app.datasets.grid_store import GridVersion


def answer_body(
    grid: GridVersion,
    statistic: str,
    requested: str,
    eps: EpsilonAmount,
    options: dict[str, Any],
    release: core.Release,
    epoch: int,
    *,
    privacy_unit: str,
    unit: str | None,
    where: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The API.md statistic answer for ``release`` (``where``: the grid's cell and slot)."""
    row = (
        statistic, release.mechanism, release.epsilon, float(release.estimate),
        float(release.sensitivity), float(release.noise_scale), release.worst_case_bias,
        release.worst_case_error, release.ci95, release.ci95_note,
    )  # fmt: skip
    kept = release.kept  # one row: its counts without the batch's arrays
    (body,) = _bodies(
        [grid.public_id], [row], [kept.size], [int(np.count_nonzero(kept > 0))],
        [plain_details(dict(release.details))], requested=requested, eps=eps, options=options,
        epoch=epoch, privacy_unit=privacy_unit, unit=unit,
    )  # fmt: skip
    return body if where is None else {**body, **where}


def answer_bodies(
    rows: core.ReleaseBatch,
    grid_ids: list[str],
    requested: str,
    eps: EpsilonAmount,
    options: dict[str, Any],
    epoch: int,
    *,
    privacy_unit: str,
    unit: str | None,
) -> list[dict[str, Any]]:
    """The statistic answer of each row, on grid ``grid_ids[i]`` (one shared ``options``)."""
    p = rows.pending
    columns = zip(
        p.statistic, p.mechanism, p.epsilon, rows.estimate, p.sensitivity, p.scale, p.bias,
        rows.worst_case_error(), rows.ci95, rows.ci95_note, strict=True,
    )  # fmt: skip
    n_users, n_charged = _users(p.kept)
    return _bodies(
        grid_ids, columns, n_users, n_charged, p.details, requested=requested, eps=eps,
        options=options, epoch=epoch, privacy_unit=privacy_unit, unit=unit,
    )  # fmt: skip


def _bodies(
    grid_ids: Sequence[str],
    rows: Iterable[tuple[Any, ...]],
    n_users: Sequence[int],
    n_charged: Sequence[int],
    details: Sequence[dict[str, Any]],
    *,
    requested: str,
    eps: EpsilonAmount,
    options: dict[str, Any],
    epoch: int,
    privacy_unit: str,
    unit: str | None,
) -> list[dict[str, Any]]:
    """One answer per row (``n_users``, ``n_charged``: its users, those charged). A release's
    ``epsilon`` is its own share when below the whole, else the amount charged."""
    used, charged = eps.used, float(eps.charged)
    return [
        {
            "query_id": qid,
            "grid_id": gid,
            "statistic": stat,
            "mechanism": mech,
            "requested_mechanism": requested,
            "epsilon": float(e) if e < used else charged,
            "estimate": est,
            "sensitivity": sens,
            "noise_scale": scale,
            "worst_case_bias": None if bias is None else float(bias),
            "worst_case_error": None if err is None else float(err),
            "ci95": None if ci is None else [ci[0], ci[1]],
            "ci95_note": note,
            "n_users": n,
            "n_users_charged": n_chg,
            "privacy_unit": privacy_unit,
            "unit": unit,
            "cached": False,
            "epoch": epoch,
            "options": options,
            "details": det,
        }
        for qid, gid, (stat, mech, e, est, sens, scale, bias, err, ci, note), n, n_chg, det in zip(
            query_ids(len(grid_ids)), grid_ids, rows, n_users, n_charged, details, strict=True
        )
    ]


def _users(kept: Sequence[np.ndarray]) -> tuple[list[int], list[int]]:
    """Per row, its users and those with a kept record (``Γ > 0``: charged)."""
    sizes = np.array([k.size for k in kept], dtype=np.int64)
    if sizes.sum() == 0:
        return sizes.tolist(), [0] * len(kept)
    row = np.repeat(np.arange(len(kept)), sizes)
    charged = np.bincount(row[np.concatenate(kept) > 0], minlength=len(kept))
    return sizes.tolist(), charged.tolist()


def query_ids(n: int) -> list[str]:
    """``n`` new answer ids: random version-4 UUIDs as 32 hex digits (``uuid4().hex``),
    from the operating system's CSPRNG in one read (a few: ``uuid4`` itself, cheaper)."""
    if n < 8:
        return [uuid.uuid4().hex for _ in range(n)]
    raw = np.frombuffer(os.urandom(16 * n), dtype=np.uint8).reshape(n, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40  # version 4
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
    text = raw.tobytes().hex()
    return [text[i : i + 32] for i in range(0, 32 * n, 32)]
