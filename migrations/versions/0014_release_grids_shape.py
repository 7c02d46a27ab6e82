"""``slot_releases.grids_shape``: the shape of a stored release's grids, so that serving
one stored in today's shape does not decode them to find out.

``GET /releases/{id}`` decoded a release's grids (a day: 243 MB of JSON, ~2 s) only to
learn whether any of them lacked a field added since (``privacy_unit``, ...). The app now
records the shape it writes (``app.releases.models.GRIDS_SHAPE``, 1); rows stored
before are 0, and are served through the upgrades as before.

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "slot_releases",
        sa.Column("grids_shape", sa.SmallInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("slot_releases", "grids_shape")
