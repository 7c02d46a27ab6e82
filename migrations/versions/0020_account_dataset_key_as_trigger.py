"""``budget_accounts.dataset_id`` loses its foreign key: Postgres checks one by a trigger per
inserted row, most of what a release's new accounts cost once they are written with their
first charge. What the key did stays done: the ledger's inserts hold the dataset's row
``FOR KEY SHARE`` as the key's check did (``app/ledger/repository.py``), and a trigger on
``datasets`` deletes a dataset's accounts with it (docs/math.md §10.6). The accounts'
``fillfactor`` goes from 60 to 50: half of each page free holds a new version of every row on
it, so a release's charge of them all is HOT (no primary-key entry written); at 60 a third
was not. Down deletes any account of a dataset that is gone, then puts the key back, checked
after, and the fillfactor of 60.

Revision ID: 0020
Revises: 0019
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FK = "fk_budget_accounts_dataset_id_datasets"
FUNCTION = "dpgate_delete_dataset_accounts"
TRIGGER = "datasets_delete_accounts"


def upgrade() -> None:
    op.execute("ALTER TABLE budget_accounts SET (fillfactor = 50)")
    op.drop_constraint(FK, "budget_accounts", type_="foreignkey")
    op.execute(
        f"CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN DELETE FROM budget_accounts WHERE dataset_id = OLD.id; RETURN OLD; END $$"
    )
    op.execute(
        f"CREATE TRIGGER {TRIGGER} AFTER DELETE ON datasets "
        f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
    )


def downgrade() -> None:
    op.execute(f"DROP TRIGGER {TRIGGER} ON datasets")
    op.execute(f"DROP FUNCTION {FUNCTION}()")
    op.execute(
        "DELETE FROM budget_accounts a WHERE NOT EXISTS "
        "(SELECT 1 FROM datasets d WHERE d.id = a.dataset_id)"
    )
    # NOT VALID, then VALIDATE: the check of existing rows takes no lock blocking writes
    op.execute(
        f"ALTER TABLE budget_accounts ADD CONSTRAINT {FK} FOREIGN KEY (dataset_id) "
        "REFERENCES datasets (id) ON DELETE CASCADE NOT VALID"
    )
    op.execute(f"ALTER TABLE budget_accounts VALIDATE CONSTRAINT {FK}")
    op.execute("ALTER TABLE budget_accounts SET (fillfactor = 60)")
