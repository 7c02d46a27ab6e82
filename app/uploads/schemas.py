"""What an upload answers."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RowError(BaseModel):
    line: int = Field(
        description="1-based physical line of the row (the header is line 1); for a "
        "GTFS-Realtime feed, the entity's 1-based number."
    )
    reason: str


class UploadResult(BaseModel):
    """Every data row ends in exactly one of accepted, rejected, duplicates, dropped_zero."""

    accepted: int = Field(description="Rows stored as new records.")
    rejected: int = Field(description="Rows refused (all counted; the first 100 in `errors`).")
    clamped: int = Field(
        description="Valid rows whose value was clamped into [0, U] (duplicates included)."
    )
    duplicates: int = Field(
        description="Valid rows whose (user, timestamp) was already stored, by this file or an "
        "earlier upload; the first one is kept."
    )
    dropped_zero: int = Field(default=0, description="Rows with value 0 dropped (drop_zero).")
    rows: int = Field(default=0, description="Data rows read (blank lines excluded).")
    grids_updated: int = Field(default=0, description="Grids whose records changed.")
    errors: list[RowError]
