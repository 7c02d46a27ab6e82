"""Database plumbing (Postgres only): base and types, embedded server, engine, units of work, the
query pool, migrations."""
