"""The server's log lines: one format (``DPGATE_LOG_FORMAT``: ``json`` or ``text``), each with its
request id. ``logging_config`` is the one ``dictConfig``, applied by the command and every uvicorn
worker. Lines never name a data subject's identifier nor a key."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

LogFormat = Literal["json", "text"]

#: The id of the request being served (set by ``app.http.middleware``); each
#: request runs in its own task, so its log lines, and no other's, see it.
REQUEST_ID: ContextVar[str | None] = ContextVar("dpgate_request_id", default=None)

#: Attributes every ``LogRecord`` has; anything else on a record was passed as ``extra``.
_STANDARD = frozenset(
    set(vars(logging.LogRecord("", 0, "", 0, "", None, None)))
    | {"message", "asctime", "request_id", "color_message", "taskName"}
)


class RequestIdFilter(logging.Filter):
    """Puts the current request's id (or None) on every record a handler writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """One JSON object per record (no newline inside: tracebacks are one string field)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            out["request_id"] = request_id
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger> [<request id>] <message>`` (the id only within a request)."""

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        rid = f" [{request_id}]" if request_id else ""
        line = f"{_timestamp(record)} {record.levelname} {record.name}{rid} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def logging_config(log_format: LogFormat, level: str = "INFO") -> dict[str, Any]:
    """The ``dictConfig`` for the whole process: one stderr handler, every logger
    (uvicorn's, Alembic's, dpgate's) propagating to it."""
    level = level.upper()
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    propagate = {"handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"dpgate": {"()": formatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "dpgate",
                "filters": ["request_id"],
            }
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            # uvicorn's default config gives these handlers of their own; here they
            # propagate to the one above (so their lines get its format)
            "uvicorn": {**propagate, "level": level},
            "uvicorn.error": {**propagate, "level": level},
            "uvicorn.access": {**propagate, "level": level},
            "alembic": {**propagate, "level": level},
            "alembic.runtime.plugins": {**propagate, "level": "WARNING"},
        },
    }


def configure_logging(log_format: LogFormat, level: str = "INFO") -> dict[str, Any]:
    """Apply :func:`logging_config` to this process; returns it (for uvicorn)."""
    import logging.config

    config = logging_config(log_format, level)
    logging.config.dictConfig(config)
    logging.captureWarnings(True)  # Python's warnings too, as log lines
    return config
