"""Stored answers are unique per grid version; one Postgres function commits a query.

* ``query_answers``: the fingerprint no longer folds in the grid version, which
  becomes part of the unique key ``(grid_id, epoch, grid_version, fingerprint)``,
  so the cached-answer lookup joins on the grid's current version in the same
  round trip that finds the grid. (Answers stored before this revision keep
  their old fingerprints and are simply not found again.)
* ``dpgate_commit_query``: lock the dataset row (``FOR KEY
  SHARE``), the users' budget accounts (ascending id) and the key row, check
  epoch, caps, twin answer and quota, then charge and store — all in the one
  statement the API sends, so locks are held for microseconds, not for
  several round trips. The function's text is
  ``migrations/sql/commit_query_0009.sql``.

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

from alembic import op

from migrations.frozen import COMMIT_QUERY_0003_SIGNATURE, commit_query_0003_sql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UQ = "uq_query_answers_grid_id"

# The function's text as this revision made it: migrations/sql/commit_query_0003.sql
# (frozen; read, not copied here).
COMMIT_QUERY = commit_query_0003_sql()
SIGNATURE = COMMIT_QUERY_0003_SIGNATURE


def upgrade() -> None:
    with op.batch_alter_table("query_answers") as batch:
        batch.drop_constraint(UQ, type_="unique")
        batch.create_unique_constraint(UQ, ["grid_id", "epoch", "grid_version", "fingerprint"])
    op.execute(COMMIT_QUERY)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
    with op.batch_alter_table("query_answers") as batch:
        batch.drop_constraint(UQ, type_="unique")
        batch.create_unique_constraint(UQ, ["grid_id", "epoch", "fingerprint"])
