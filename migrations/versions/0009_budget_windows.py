"""Budget windows (issue 25): a dataset's budget per user and per day, week or month.

* ``datasets.budget_window``: ``none`` (every dataset so far), ``day``, ``week``, ``month``.
* ``budget_accounts.window_start`` (part of the primary key, before ``user_id``) and
  ``ledger_entries.window_start``: the window a charge went to, named by its first
  local date; ``0001-01-01`` for a dataset without windows, so every existing account
  and entry keeps its meaning.
* ``dpgate_commit_query`` takes the window (``migrations/sql/commit_query_0009.sql``) and
  runs with ``enable_seqscan = off`` as migration 0004 set on the first version.

Downgrading is refused while a windowed dataset has accounts (their windows would
collide in the old primary key).

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.frozen import (
    COMMIT_QUERY_0003_SIGNATURE,
    COMMIT_QUERY_0009_SIGNATURE,
    commit_query_0003_sql,
    commit_query_0009_sql,
)

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ALL_TIME = sa.text("'0001-01-01'")
PK = "pk_budget_accounts"


def upgrade() -> None:
    op.add_column(
        "datasets",
        sa.Column("budget_window", sa.String(length=8), server_default="none", nullable=False),
    )
    op.add_column(
        "budget_accounts",
        sa.Column("window_start", sa.Date(), server_default=ALL_TIME, nullable=False),
    )
    op.drop_constraint(PK, "budget_accounts", type_="primary")
    op.create_primary_key(PK, "budget_accounts", ["dataset_id", "epoch", "window_start", "user_id"])
    # ledger_entries is append-only (row triggers of 0002); adding a column with a
    # constant default rewrites no row and fires no trigger
    op.add_column(
        "ledger_entries",
        sa.Column("window_start", sa.Date(), server_default=ALL_TIME, nullable=False),
    )
    op.execute(f"DROP FUNCTION {COMMIT_QUERY_0003_SIGNATURE}")
    op.execute(commit_query_0009_sql())
    op.execute(f"ALTER FUNCTION {COMMIT_QUERY_0009_SIGNATURE} SET enable_seqscan = off")


def downgrade() -> None:
    windowed = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM budget_accounts WHERE window_start <> '0001-01-01'"))
        .scalar_one()
    )
    if windowed:
        raise RuntimeError(
            f"cannot downgrade below 0009: {windowed} budget accounts belong to budget "
            "windows, which the older schema cannot hold"
        )
    op.execute(f"DROP FUNCTION {COMMIT_QUERY_0009_SIGNATURE}")
    op.execute(commit_query_0003_sql())
    op.execute(f"ALTER FUNCTION {COMMIT_QUERY_0003_SIGNATURE} SET enable_seqscan = off")
    op.drop_column("ledger_entries", "window_start")
    op.drop_constraint(PK, "budget_accounts", type_="primary")
    op.create_primary_key(PK, "budget_accounts", ["dataset_id", "epoch", "user_id"])
    op.drop_column("budget_accounts", "window_start")
    op.drop_column("datasets", "budget_window")
