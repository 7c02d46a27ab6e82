"""Alembic migrations (shipped as a package so an installed dpgate can migrate)."""
