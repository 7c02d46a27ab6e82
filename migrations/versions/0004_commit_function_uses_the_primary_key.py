"""The commit function reaches budget accounts through their primary key, always.

``dpgate_commit_query`` locks and charges a grid's users with ``user_id = ANY(...)``
over ``budget_accounts``. On a table of a few thousand rows Postgres' cost model
prefers a sequential scan that tests every account against the array (0.4 ms at
1,200 accounts, growing with the dataset) to the primary-key probes (0.14 ms,
whatever the table holds); which plan a server picks depended on how fresh its
statistics were, so the API's throughput swung by a third between runs. The
function now runs with ``enable_seqscan = off`` (Postgres only; every statement in
it is a key look-up, so no other plan changes).

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

from alembic import op

from migrations.frozen import COMMIT_QUERY_0003_SIGNATURE

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = COMMIT_QUERY_0003_SIGNATURE


def upgrade() -> None:
    op.execute(f"ALTER FUNCTION {SIGNATURE} SET enable_seqscan = off")


def downgrade() -> None:
    op.execute(f"ALTER FUNCTION {SIGNATURE} RESET enable_seqscan")
