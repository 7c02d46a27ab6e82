"""The one settings class: every ``DPGATE_*`` environment variable lives here."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Where the default secret lived before it moved beside the database (still adopted).
LEGACY_SECRET_FILE = "dpgate-secret.key"  # noqa: S105 - a file name
#: Placeholders from old examples and docker-compose files: never accepted as secrets.
PLACEHOLDER_SECRETS = frozenset(
    {"change-me-admin-key", "change-me-secret", "change-me", "changeme", "secret", "admin"}
)
MIN_ADMIN_KEY_LENGTH = 24


class Settings(BaseSettings):
    """Runtime configuration, read from ``DPGATE_*`` variables (and a ``.env`` file)."""

    model_config = SettingsConfigDict(
        env_prefix="DPGATE_", env_file=".env", extra="ignore", env_ignore_empty=True
    )

    database_url: str | None = Field(
        default=None,
        description="A Postgres URL (postgresql+psycopg://...). When unset, dpgate starts "
        "an embedded Postgres whose data directory is ./dpgate-postgres (app.db.embedded).",
    )
    admin_key: SecretStr | None = Field(
        default=None, description="When set, an admin key with exactly this value exists."
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description=(
            "Secret for the keyed hashing (HMAC-SHA256) of user identifiers; it can never "
            "change for a database's lifetime (start-up refuses another one). When unset: "
            "`secret_file`, else a random secret created once and kept in the database."
        ),
    )
    secret_file: Path | None = Field(
        default=None, description="A file holding the hashing secret (created if missing)."
    )
    max_body_bytes: int = Field(default=512 * 1024 * 1024, gt=0)
    max_json_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait for the next part of a request body before answering 408.",
    )
    body_deadline_seconds: float = Field(
        default=900.0,
        gt=0,
        description="Longest time to receive a whole request body (an upload holds its "
        "dataset's lock meanwhile) before answering 408.",
    )
    rate_limit_per_minute: int = Field(
        default=0, ge=0, description="Requests per minute per key; 0 switches it off."
    )
    anonymous_rate_limit_per_minute: int = Field(
        default=600,
        ge=0,
        description="Requests a minute per client address without a key (the catalogue, "
        "public releases, the map), per server process; 0 switches it off. Behind a proxy, "
        "let uvicorn trust its X-Forwarded-For (FORWARDED_ALLOW_IPS).",
    )
    anonymous_requests_per_second: int = Field(
        default=200,
        ge=0,
        description="Requests a second without a key that one server process answers in "
        "all, whatever their addresses (then 429); 0 switches it off.",
    )
    grid_cache_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    db_pool_size: int = Field(
        default=5,
        ge=1,
        description="Connections per server process for uploads, admin calls and the "
        "rarer query steps (as many again may open in bursts).",
    )
    heavy_concurrency: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Releases, release previews and uploads running at once per server "
        "process, in a capacity of their own (they never hold the connections of cheap "
        "requests); one more waits at most `db_deadline_seconds`, then answers 503 with "
        "Retry-After. Each may hold two connections and, for a day's release, ~1-2 GiB.",
    )
    query_pool_size: int = Field(
        default=10,
        ge=1,
        description="Connections per server process for the query hot path "
        "(look-up and commit, sent from the event loop).",
    )
    db_connect_timeout_seconds: float = Field(
        default=5.0, gt=0, description="Longest wait to open a connection (then 503)."
    )
    db_statement_timeout_seconds: float = Field(
        default=60.0,
        ge=0,
        description="Longest run of one statement, lock waits included, before it "
        "is cancelled and the request answers 503 (0: no limit); also the longest a "
        "session may stay idle inside a transaction.",
    )
    db_deadline_seconds: float = Field(
        default=8.0,
        ge=3,
        le=600,
        description="When the database stops answering (a stopped or frozen server, a "
        "lost host), every request waiting on it answers 503 within about this time, "
        "connections already open included: a heartbeat (`SELECT 1` each second) "
        "unanswered for this long less 1 s shuts them, and requests answer 503 at once "
        "until it answers again. Also the longest wait for a turn at the database, for a "
        "lock and for a free pooled connection (then 503 with Retry-After).",
    )

    map_tile_url: str | None = Field(
        default=None,
        pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[^\s\"'<>;]*$",
        description="A tile server of your own for the map's background, e.g. "
        "`https://tiles.example.org/{z}/{x}/{y}.png` (Web Mercator, 256 px). Off by default: "
        "the map then loads nothing from anywhere but dpgate.",
    )

    @field_validator("map_tile_url")
    @classmethod
    def _tile_template(cls, value: str | None) -> str | None:
        if value is not None and not all(p in value for p in ("{z}", "{x}", "{y}")):
            raise ValueError("must contain {z}, {x} and {y}")
        return value

    log_format: Literal["json", "text"] = Field(
        default="text",
        description="Server log lines: `json` (one JSON object per line, with the request "
        "id) or `text`.",
    )
    metrics: Literal["admin", "public", "off"] = Field(
        default="admin",
        description="Who may read GET /metrics: `admin` (the metrics token or an admin key), "
        "`public` (anyone: for a server only its scraper can reach) or `off` (404).",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="A bearer token that may read /metrics and nothing else (so the scraper "
        "needs no admin key); at least 24 characters.",
    )

    @field_validator("admin_key", "secret_key", "metrics_token")
    @classmethod
    def _no_placeholder(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and value.get_secret_value().strip().lower() in PLACEHOLDER_SECRETS:
            raise ValueError("is a known placeholder; generate a random value")
        return value

    @field_validator("admin_key", "metrics_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_ADMIN_KEY_LENGTH:
            raise ValueError(
                f"must be at least {MIN_ADMIN_KEY_LENGTH} characters (e.g. openssl rand -hex 32)"
            )
        return value


@lru_cache
def get_settings() -> Settings:
    return Settings()
