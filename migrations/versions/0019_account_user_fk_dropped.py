"""``budget_accounts.user_id`` loses its foreign key to ``dataset_users``: Postgres checks
it by a trigger per inserted row, most of the cost of creating a profile release's 10⁶
accounts. The ledger creates accounts only for user ids of the same dataset's records,
and a dataset's users go only with the dataset, whose own key still deletes its accounts
(docs/math.md §10.6). Down re-adds the key, checked after.

Revision ID: 0019
Revises: 0018
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FK = "fk_budget_accounts_user_id_dataset_users"


def upgrade() -> None:
    op.drop_constraint(FK, "budget_accounts", type_="foreignkey")


def downgrade() -> None:
    # NOT VALID, then VALIDATE: the check of existing rows takes no lock blocking writes
    op.execute(
        f"ALTER TABLE budget_accounts ADD CONSTRAINT {FK} FOREIGN KEY (user_id) "
        "REFERENCES dataset_users (id) ON DELETE CASCADE NOT VALID"
    )
    op.execute(f"ALTER TABLE budget_accounts VALIDATE CONSTRAINT {FK}")
