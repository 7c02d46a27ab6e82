"""dpgate: user-level differentially private statistics over spatio-temporal IoT data."""

__version__ = "0.1.0"
