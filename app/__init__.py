"""dpgate: user-level differentially private statistics over spatio-temporal IoT data."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dpgate")  # pyproject.toml's, as installed
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
