"""What a server process remembers between queries, to answer a new query without its look-up.

A grid's context (:class:`~app.queries.repository.GridContext`) is its dataset's settings,
which never change, plus its ``version`` and the dataset's ``epoch``, which may. A query
this process has not been asked before (its grid and fingerprint) is most likely new, so
it is released at once on the grid's remembered context and committed by the one
statement that checks that context still holds (``app.ledger.committer``: the grid at that
version, the dataset at that cap, then the commit function's epoch and twin checks). A
query asked before goes through the look-up, which serves a stored answer without any
release. A guess that was wrong costs a release that is discarded unseen (docs/math.md
§10.2) and a look-up; the ledger decides exactly as after a look-up.
"""

from __future__ import annotations

from app.queries.repository import GridContext

#: Grids whose context is kept, and (grid, fingerprint) pairs remembered as asked.
MAX_GRIDS = 4096
MAX_ASKED = 65536


class KnownGrids:
    """One process's grid contexts and queries asked (used from its event loop only)."""

    def __init__(self, max_grids: int = MAX_GRIDS, max_asked: int = MAX_ASKED) -> None:
        self._grids: dict[str, GridContext] = {}
        self._asked: dict[tuple[str, str], None] = {}
        self._max_grids, self._max_asked = max_grids, max_asked

    def unasked(self, grid_public_id: str, fingerprint: str) -> GridContext | None:
        """The grid's remembered context if this query was not asked here before (and
        remember it as asked); ``None``: look it up."""
        asked = (grid_public_id, fingerprint)
        if asked in self._asked:
            return None
        if len(self._asked) >= self._max_asked:
            del self._asked[next(iter(self._asked))]  # the oldest
        self._asked[asked] = None
        return self._grids.get(grid_public_id)

    def remember(self, ctx: GridContext) -> None:
        """The context a look-up has just read."""
        if ctx.public_id not in self._grids and len(self._grids) >= self._max_grids:
            del self._grids[next(iter(self._grids))]
        self._grids[ctx.public_id] = ctx

    def forget(self, grid_public_id: str) -> None:
        """A commit found the remembered context moved on (version, epoch, or gone)."""
        self._grids.pop(grid_public_id, None)
