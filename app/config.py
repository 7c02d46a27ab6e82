"""The one settings class: every ``DPGATE_*`` environment variable lives here."""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_SECRET_FILE = "dpgate-secret.key"  # noqa: S105 - a file name


class Settings(BaseSettings):
    """Runtime configuration, read from ``DPGATE_*`` variables (and a ``.env`` file)."""

    model_config = SettingsConfigDict(env_prefix="DPGATE_", env_file=".env", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./dpgate.db",
        description="SQLAlchemy URL; postgresql+psycopg://... selects Postgres.",
    )
    admin_key: SecretStr | None = Field(
        default=None, description="When set, an admin key with exactly this value exists."
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description=(
            "Secret for the keyed hashing (HMAC-SHA256) of user identifiers. When unset, a "
            "random secret is created once in `secret_file` and reused."
        ),
    )
    secret_file: Path = Field(default=Path(DEFAULT_SECRET_FILE))
    max_body_bytes: int = Field(default=512 * 1024 * 1024, gt=0)
    max_json_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait for the next part of a request body before answering 408.",
    )
    rate_limit_per_minute: int = Field(
        default=0, ge=0, description="Requests per minute per key; 0 switches it off."
    )
    grid_cache_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    db_pool_size: int = Field(
        default=5,
        ge=1,
        description="Connections per server process for uploads, admin calls and the "
        "rarer query steps (as many again may open in bursts).",
    )
    query_pool_size: int = Field(
        default=10,
        ge=1,
        description="Postgres: connections per server process for the query hot path "
        "(look-up and commit, sent from the event loop).",
    )

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def hashing_secret(self) -> bytes:
        """The HMAC key for user identifiers (created once in ``secret_file`` if unset)."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().encode()
        path = self.secret_file
        if not path.exists():
            path.write_text(secrets.token_hex(32))
            path.chmod(0o600)
        return path.read_text().strip().encode()


@lru_cache
def get_settings() -> Settings:
    return Settings()
