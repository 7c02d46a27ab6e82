"""Grid listings by index: one index per listing order, holding what is filtered on.

``GET /datasets/{id}/grids`` orders a dataset's grids (its own, ``slot_minutes = 0``, or
the coarser ones of one slot length) by ``(slot_start, h3_cell)``, by ``-slot_start``
or by ``n_users`` either way. Each order is one index range whose entries also hold
``n_users``, ``n_records`` and ``id``: a page reads its ids there (an index-only scan;
the rows an ``offset`` skips are index entries, never read from the table) and then
only its own rows. ``budget_accounts`` gets room on its pages (``fillfactor``) so a
charge's update stays on the row's page and leaves the primary key alone (a HOT
update); existing pages get it as they are rewritten.

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = ["dataset_id", "slot_minutes"]
INDEXES = {
    "ix_grids_listing": (["slot_start", "h3_cell"], ["n_users", "n_records", "id"]),
    "ix_grids_listing_desc": ([sa.text("slot_start DESC"), "h3_cell"], ["n_users", "id"]),
    "ix_grids_listing_users": (["n_users", "slot_start", "h3_cell"], ["id"]),
    "ix_grids_listing_users_desc": ([sa.text("n_users DESC"), "slot_start", "h3_cell"], ["id"]),
}


def upgrade() -> None:
    for name, (columns, include) in INDEXES.items():
        op.create_index(name, "grids", [*KEY, *columns], postgresql_include=include)
    op.execute("ALTER TABLE budget_accounts SET (fillfactor = 60)")


def downgrade() -> None:
    op.execute("ALTER TABLE budget_accounts RESET (fillfactor)")
    for name in INDEXES:
        op.drop_index(name, table_name="grids")
