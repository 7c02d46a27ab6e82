"""The analyst's side (issue 17): the key's own stored answers, listed newest first.

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


INDEX = "ix_query_answers_key_id_id"


def upgrade() -> None:
    # GET /queries lists a key's stored answers newest first: one index range scan.
    # Every answer already records its key (0001), so nothing else changes.
    op.create_index(INDEX, "query_answers", ["key_id", "id"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="query_answers")
