"""The raw records' partitions: ``records`` by ``LIST (dataset_id)``, each ``records_d{id}`` by
``RANGE (ts)``, one per UTC month (migration 0017).

A dataset's partition is made with it, a month's (and the next) before its first record (an
upload fills a month it makes before attaching it); retention drops whole months. Partitions are
attached (``SHARE UPDATE EXCLUSIVE`` on the parent), so other datasets' work goes on."""

from __future__ import annotations

from datetime import UTC, datetime

from psycopg import sql
from sqlalchemy.orm import Session

from app.db.unit import driver_connection


def dataset_table(dataset_id: int) -> str:
    return f"records_d{int(dataset_id)}"


def month_table(dataset_id: int, month: datetime) -> str:
    return f"records_d{int(dataset_id)}_m{month:%Y%m}"


def month_of(moment: datetime) -> datetime:
    """The first instant (UTC) of ``moment``'s UTC month."""
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def next_month(month: datetime) -> datetime:
    return month.replace(year=month.year + month.month // 12, month=month.month % 12 + 1)


def months_between(first: datetime, last: datetime) -> list[datetime]:
    """The months from ``first``'s to ``last``'s, both included."""
    out, month = [], month_of(first)
    while month <= last:
        out.append(month)
        month = next_month(month)
    return out


def _existing(session: Session, names: list[str]) -> set[str]:
    with driver_connection(session).cursor() as cur:
        cur.execute(
            "SELECT relname FROM pg_class WHERE relname = ANY(%s) "
            "AND relnamespace = current_schema()::regnamespace",
            (names,),
        )
        return {r[0] for r in cur.fetchall()}


def ensure_dataset_partition(session: Session, dataset_id: int) -> None:
    """The dataset's partition of ``records`` (empty, by month), made if missing."""
    name = dataset_table(dataset_id)
    if _existing(session, [name]):
        return
    with driver_connection(session).cursor() as cur:
        cur.execute(
            sql.SQL("CREATE TABLE {} (LIKE records INCLUDING DEFAULTS) PARTITION BY RANGE (ts)")
            .format(sql.Identifier(name))
        )  # fmt: skip
        cur.execute(
            sql.SQL("ALTER TABLE records ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.Identifier(name), sql.Literal(int(dataset_id))
            )
        )


def ensure_months(
    session: Session, dataset_id: int, first: datetime, last: datetime, *, detached: bool = False
) -> list[datetime]:
    """The month partitions of the dataset from ``first``'s month to the month after
    ``last``'s (and the dataset's own), made where missing; the months left detached.

    With ``detached``, a missing month up to ``last``'s is made but not attached: an upload
    fills it by ``COPY`` and then :func:`attach_month` builds its key's index in one sorted
    pass, where each record would otherwise go into the index one at a time."""
    ensure_dataset_partition(session, dataset_id)
    months = months_between(first, next_month(month_of(last)))
    names = [month_table(dataset_id, m) for m in months]
    have = _existing(session, names)
    made = []
    with driver_connection(session).cursor() as cur:
        for month, name in zip(months, names, strict=True):
            if name in have:
                continue
            cur.execute(sql.SQL("CREATE TABLE {} (LIKE records)").format(sql.Identifier(name)))
            if detached and month <= last:
                made.append(month)
            else:
                attach_month(session, dataset_id, month)
    return made


def attach_month(session: Session, dataset_id: int, month: datetime) -> None:
    """Attach a month's table to the dataset's partition (building its index, checking that
    every row is of the month)."""
    with driver_connection(session).cursor() as cur:
        cur.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
                sql.Identifier(dataset_table(dataset_id)),
                sql.Identifier(month_table(dataset_id, month)),
                sql.Literal(month),
                sql.Literal(next_month(month)),
            )
        )


def stored_months(session: Session, dataset_id: int) -> list[datetime]:
    """The months that have a partition of the dataset, ascending."""
    with driver_connection(session).cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname",
            (dataset_table(dataset_id),),
        )
        names = [r[0] for r in cur.fetchall()]
    return [datetime.strptime(n.rsplit("_m", 1)[1], "%Y%m").replace(tzinfo=UTC) for n in names]


def drop_month(session: Session, dataset_id: int, month: datetime) -> None:
    """Detach and drop one month of the dataset's records, whole: no row is deleted,
    so nothing is left to vacuum."""
    with driver_connection(session).cursor() as cur:
        cur.execute(
            sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                sql.Identifier(dataset_table(dataset_id)),
                sql.Identifier(month_table(dataset_id, month)),
            )
        )
        cur.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(month_table(dataset_id, month))))
