"""Operating dpgate: request ids, structured logs, Prometheus metrics, versions."""
