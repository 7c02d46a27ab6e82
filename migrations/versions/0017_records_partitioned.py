"""Raw records partitioned by dataset, then by month; a dataset's raw retention.

* ``records`` becomes ``PARTITION BY LIST (dataset_id)``; each dataset's partition
  ``records_d{id}`` is ``PARTITION BY RANGE (ts)``, one partition per UTC month
  ``records_d{id}_m{YYYYMM}`` (``app.datasets.partitions``). Same columns and key.
  Every dataset gets its partition, and every month holding one of its records its
  month's; the stored rows are moved into them.
* ``datasets.raw_retention_days`` (null: kept for ever) and ``datasets.raw_kept_from``
  (the first instant whose raw records are all kept; null: none dropped yet).

Downgrading puts every row back into one plain table (and forgets the retention
settings); it refuses once records were dropped, as their grids could no longer be
rebuilt from them.

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (  # in the order 0001 made them
    "dataset_id integer NOT NULL, grid_id integer NOT NULL, user_id integer NOT NULL, "
    "ts timestamptz NOT NULL, value double precision NOT NULL"
)


def _next(year: int, month: int) -> tuple[int, int]:
    return (year + month // 12, month % 12 + 1)


def upgrade() -> None:
    conn = op.get_bind()
    op.execute("ALTER TABLE records RENAME TO records_unpartitioned")
    op.execute("ALTER TABLE records_unpartitioned RENAME CONSTRAINT pk_records TO pk_records_old")
    op.execute(
        f"CREATE TABLE records ({COLUMNS}, CONSTRAINT pk_records "
        "PRIMARY KEY (dataset_id, user_id, ts)) PARTITION BY LIST (dataset_id)"
    )
    datasets = [r[0] for r in conn.execute(sa.text("SELECT id FROM datasets ORDER BY id"))]
    for ds in datasets:
        op.execute(
            f"CREATE TABLE records_d{ds} PARTITION OF records FOR VALUES IN ({ds}) "
            "PARTITION BY RANGE (ts)"
        )
        months = conn.execute(
            sa.text(
                "SELECT DISTINCT extract(year FROM ts AT TIME ZONE 'UTC')::int, "
                "extract(month FROM ts AT TIME ZONE 'UTC')::int "
                "FROM records_unpartitioned WHERE dataset_id = :d"
            ),
            {"d": ds},
        ).all()
        for year, month in months:
            ny, nm = _next(year, month)
            op.execute(
                f"CREATE TABLE records_d{ds}_m{year:04d}{month:02d} PARTITION OF records_d{ds} "
                f"FOR VALUES FROM ('{year:04d}-{month:02d}-01 00:00+00') "
                f"TO ('{ny:04d}-{nm:02d}-01 00:00+00')"
            )
    op.execute(
        "INSERT INTO records (dataset_id, user_id, ts, grid_id, value) "
        "SELECT dataset_id, user_id, ts, grid_id, value FROM records_unpartitioned"
    )
    op.execute("DROP TABLE records_unpartitioned")
    op.add_column("datasets", sa.Column("raw_retention_days", sa.Integer(), nullable=True))
    op.add_column("datasets", sa.Column("raw_kept_from", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    conn = op.get_bind()
    dropped = conn.execute(
        sa.text("SELECT count(*) FROM datasets WHERE raw_kept_from IS NOT NULL")
    ).scalar_one()
    if dropped:
        raise RuntimeError(
            f"{dropped} dataset(s) had raw records dropped by retention: 0017 cannot be undone"
        )
    op.drop_column("datasets", "raw_kept_from")
    op.drop_column("datasets", "raw_retention_days")
    op.execute(f"CREATE TABLE records_unpartitioned ({COLUMNS})")
    op.execute(
        "INSERT INTO records_unpartitioned (dataset_id, user_id, ts, grid_id, value) "
        "SELECT dataset_id, user_id, ts, grid_id, value FROM records"
    )
    op.execute("DROP TABLE records CASCADE")  # with every partition
    op.execute("ALTER TABLE records_unpartitioned RENAME TO records")
    op.execute("ALTER TABLE records ADD CONSTRAINT pk_records PRIMARY KEY (dataset_id, user_id, ts)")
