"""A stored release's answer split from its grids; grids and kept sets as bytes.

A day release (24 slots, 120,000 grids) had an answer of 243 MB of ``json`` and kept
sets of 26 MB: storing it cost seconds of encoding to text, of parsing and of ``pglz``
compression; the listing parsed whole answers for a few small fields.

* ``answer`` (json) becomes ``head`` (json): the answer with ``"grids": null`` in place
  of its grids (its keys in the same order), plus ``n_grids`` (integer), their count,
  which the listing reads instead of ``jsonb_array_length``.
* ``grids`` (bytea): the grids' JSON text as UTF-8 bytes; ``kept`` (json) becomes bytea
  the same way. Both are ``COMPRESSION lz4`` where the server is built with lz4 (the
  embedded ``pgserver`` is not: they keep the default compression there).

Existing rows are converted: each value keeps its JSON text, so downgrading gives back
the same ``answer`` and ``kept`` text (keys and values in the same order).

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A json object rebuilt from ``json_each`` of column ``src`` with the value of key
# 'grids' replaced by ``grids`` (JSON text): the other keys and values as they were.
_REBUILD = """(SELECT coalesce('{{' || string_agg(to_json(e.key)::text || ':' ||
    CASE WHEN e.key = 'grids' THEN {grids} ELSE e.value::text END, ',' ORDER BY e.n)
    || '}}', '{{}}')::json FROM json_each({src}) WITH ORDINALITY AS e(key, value, n))"""

# SET COMPRESSION lz4 where the server supports it (else the default compression stays)
_LZ4 = """DO $$ BEGIN
    IF 'lz4' = ANY((SELECT enumvals FROM pg_settings
                    WHERE name = 'default_toast_compression')::text[]) THEN
        ALTER TABLE slot_releases ALTER COLUMN grids SET COMPRESSION lz4,
                                  ALTER COLUMN kept_bytes SET COMPRESSION lz4;
    END IF;
EXCEPTION WHEN feature_not_supported THEN NULL;
END $$"""


def upgrade() -> None:
    op.execute(
        "ALTER TABLE slot_releases ADD COLUMN head json, ADD COLUMN n_grids integer,"
        " ADD COLUMN grids bytea, ADD COLUMN kept_bytes bytea"
    )
    op.execute(_LZ4)  # before the values are written: compression applies to new values
    head = _REBUILD.format(src="answer", grids="'null'")
    op.execute(
        "UPDATE slot_releases SET"
        f" head = {head},"
        " n_grids = json_array_length(answer -> 'grids'),"
        " grids = convert_to((answer -> 'grids')::text, 'UTF8'),"
        " kept_bytes = convert_to(kept::text, 'UTF8')"
    )
    op.execute("ALTER TABLE slot_releases DROP COLUMN answer, DROP COLUMN kept")
    op.execute("ALTER TABLE slot_releases RENAME COLUMN kept_bytes TO kept")
    for column in ("head", "n_grids", "grids", "kept"):
        op.alter_column("slot_releases", column, nullable=False)


def downgrade() -> None:
    op.execute("ALTER TABLE slot_releases ADD COLUMN answer json, ADD COLUMN kept_json json")
    answer = _REBUILD.format(src="head", grids="convert_from(grids, 'UTF8')")
    op.execute(
        "UPDATE slot_releases SET"
        f" answer = {answer},"
        " kept_json = convert_from(kept, 'UTF8')::json"
    )
    op.execute(
        "ALTER TABLE slot_releases DROP COLUMN head, DROP COLUMN n_grids,"
        " DROP COLUMN grids, DROP COLUMN kept"
    )
    op.execute("ALTER TABLE slot_releases RENAME COLUMN kept_json TO kept")
    for column in ("answer", "kept"):
        op.alter_column("slot_releases", column, nullable=False)
