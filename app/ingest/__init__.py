"""Pure parsing for ingestion: CSV streaming, timestamps, timeslots (no database here)."""
