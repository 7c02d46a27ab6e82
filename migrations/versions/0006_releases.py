"""Releases a city can use (issue 15): coarser grids made on demand.

``grids.slot_minutes`` is 0 for a dataset's own grids and the slot length of a
coarser grid (an H3 parent cell and/or a longer slot, built from the stored
records on demand). The unique key gains it, so a coarser grid may share its
cell and start with a grid of the dataset's own slot length.

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_UQ = "uq_grids_dataset_id"
NEW_UQ = "uq_grids_dataset_id_slot_minutes"


def upgrade() -> None:
    with op.batch_alter_table("grids", schema=None) as batch:
        batch.add_column(
            sa.Column("slot_minutes", sa.Integer(), nullable=False, server_default="0")
        )
        batch.drop_constraint(OLD_UQ, type_="unique")
        batch.create_unique_constraint(
            NEW_UQ, ["dataset_id", "slot_minutes", "h3_cell", "slot_start"]
        )


def downgrade() -> None:
    op.execute("DELETE FROM grids WHERE slot_minutes <> 0")
    with op.batch_alter_table("grids", schema=None) as batch:
        batch.drop_constraint(NEW_UQ, type_="unique")
        batch.create_unique_constraint(OLD_UQ, ["dataset_id", "h3_cell", "slot_start"])
        batch.drop_column("slot_minutes")
