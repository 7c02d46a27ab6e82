"""The Python client of dpgate (``dpgate.Client``), shipped with the server.

>>> from dpgate import Client
>>> with Client("http://127.0.0.1:8000", key) as dp:          # doctest: +SKIP
...     grid = dp.grids(1, min_users=10, sort="-n_users")[0]
...     print(dp.mean(grid.grid_id, epsilon=1).estimate)
"""

from importlib.metadata import PackageNotFoundError, version

from dpgate.client import Client
from dpgate.errors import (
    BudgetExhausted,
    Conflict,
    DpgateError,
    Forbidden,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RequestTimeout,
    Unauthenticated,
    Unavailable,
)
from dpgate.frames import answers_dataframe, release_dataframe, release_geodataframe
from dpgate.models import (
    Budget,
    Dataset,
    Grid,
    KeyInfo,
    Quote,
    Release,
    ReleasePreview,
    ReleaseSummary,
    StatisticAnswer,
    StoredAnswer,
    UploadResult,
)

try:
    __version__ = version("dpgate")  # the distribution that ships the server and this client
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Budget",
    "BudgetExhausted",
    "Client",
    "Conflict",
    "Dataset",
    "DpgateError",
    "Forbidden",
    "Grid",
    "IdempotencyConflict",
    "InvalidRequest",
    "KeyInfo",
    "NotFound",
    "PayloadTooLarge",
    "Quote",
    "RateLimited",
    "Release",
    "ReleasePreview",
    "ReleaseSummary",
    "RequestTimeout",
    "StatisticAnswer",
    "StoredAnswer",
    "Unauthenticated",
    "Unavailable",
    "UploadResult",
    "__version__",
    "answers_dataframe",
    "release_dataframe",
    "release_geodataframe",
]
