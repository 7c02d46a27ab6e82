"""Database plumbing: declarative base, column types, engine and sessions."""
