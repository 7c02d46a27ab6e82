"""Which secret hashes user identifiers, and the check that it never changes (a new secret would
give every user a second budget): the database keeps the first secret's fingerprint and start-up
refuses any other. The secret: ``DPGATE_SECRET_KEY``, else ``DPGATE_SECRET_FILE``, else one
generated once and kept in the instance row."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.config import LEGACY_SECRET_FILE, Settings
from app.db.engine import make_sessionmaker
from app.instance.repository import InstanceRepository

log = logging.getLogger("dpgate.instance")

FINGERPRINT_LABEL = b"dpgate hashing-secret fingerprint v1"
SECRET_VARIABLE = "DPGATE_SECRET_KEY"  # noqa: S105 - a variable name


class SecretMismatch(Exception):
    """The configured hashing secret is not the one this database was first used with."""


def fingerprint(secret: bytes) -> str:
    """HMAC-SHA256 of a fixed label under ``secret``: equal for equal secrets, and
    useless for recovering the secret or testing user identifiers."""
    return hmac.new(secret, FINGERPRINT_LABEL, hashlib.sha256).hexdigest()


def read_or_create_secret_file(path: Path) -> bytes:
    """The secret in ``path``, created (random 256 bits, mode 0600) if the file is
    missing; two processes creating it at once agree on the first one written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    secret = path.read_text().strip()
    if not secret:
        raise SecretMismatch(f"the secret file {path} is empty; set {SECRET_VARIABLE}")
    return secret.encode()


def _configured_secret(settings: Settings) -> bytes | None:
    """The secret from the variable or a file, or ``None`` when it lives in the database."""
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value().encode()
    if settings.secret_file is not None:
        return read_or_create_secret_file(settings.secret_file)
    return None


def _mismatch(settings: Settings) -> SecretMismatch:
    where = (
        f"the {SECRET_VARIABLE} given differs"
        if settings.secret_key is not None
        else f"{SECRET_VARIABLE} is unset and the default secret differs"
    )
    return SecretMismatch(
        f"{SECRET_VARIABLE}: this database was first used with another hashing secret "
        f"({where}). With this one every data subject would get a second identity and a "
        f"second privacy budget, so dpgate refuses to start. Set {SECRET_VARIABLE} to the "
        "secret the database was first used with (or restore its secret file)."
    )


def resolve_in_session(session: Session, settings: Settings) -> bytes:
    """The hashing secret, its fingerprint pinned on first use (else SecretMismatch)."""
    repo = InstanceRepository(session)
    row = repo.get()
    secret = _configured_secret(settings)
    generated: str | None = None
    if secret is None:  # no configured secret: the database keeps one
        if row is not None and row.generated_secret is not None:
            secret = row.generated_secret.encode()
        elif row is None:
            legacy = Path(LEGACY_SECRET_FILE)
            generated = legacy.read_text().strip() if legacy.is_file() else secrets.token_hex(32)
            secret = generated.encode()
        else:
            raise _mismatch(settings)
    if row is None:
        row = repo.add_first(fingerprint(secret), generated)
        if row.generated_secret is not None and generated is not None:
            secret = row.generated_secret.encode()  # another process generated it first
    if not hmac.compare_digest(row.secret_fingerprint, fingerprint(secret)):
        raise _mismatch(settings)
    return secret


def resolve_hashing_secret(settings: Settings, engine: Engine) -> bytes:
    """:func:`resolve_in_session` in a transaction of its own on ``engine`` (whose pool
    is emptied afterwards: a construction-time connection is never handed to a request)."""
    try:
        with make_sessionmaker(engine).begin() as session:
            return resolve_in_session(session, settings)
    finally:
        engine.dispose()
