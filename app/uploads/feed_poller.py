"""Pulling a GTFS-Realtime feed into a dataset (``dpgate ingest gtfs-rt``).

Each poll fetches the feed (httpx; ``timeout`` bounds the whole fetch) and, when its bytes
changed, ingests it as ``POST /datasets/{id}/records`` would, in a transaction of its own (a
stored position is a duplicate). A feed that is down or not a ``FeedMessage`` is logged and polled
at the next tick. A stop (SIGINT, SIGTERM) is honoured between polls, the poll under way finished
first (its fetch given at most ``STOP_GRACE`` seconds)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any

import certifi
import httpx
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.kit.errors import DPGateError
from app.uploads.service import UploadOptions, upload_records

log = logging.getLogger("dpgate.ingest")

#: What the poller asks for: any protobuf type (feeds are served under several names).
ACCEPT = "application/x-protobuf, application/protobuf, application/octet-stream;q=0.9, */*;q=0.5"
#: Seconds a fetch under way may still take once a stop is asked for.
STOP_GRACE = 1.0


@dataclass
class PollTotals:
    """What every poll of a run added up to."""

    polls: int = 0
    failed: int = 0
    unchanged: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0


class FeedPoller:
    """Polls ``url`` and ingests what it serves into dataset ``dataset_id``."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        dataset_id: int,
        url: str,
        *,
        hash_secret: bytes,
        options: UploadOptions | None = None,
        timeout: float = 30.0,
        max_bytes: int = 512 * 1024 * 1024,
    ) -> None:
        self.sessions = sessions
        self.dataset_id = dataset_id
        self.url = url
        self.hash_secret = hash_secret
        self.options = options or UploadOptions(format="gtfs-rt")
        self.max_bytes = max_bytes
        self.timeout = timeout
        self._tls = ssl.create_default_context(cafile=certifi.where())  # made once, not per poll
        self.totals = PollTotals()
        self._stopping = threading.Event()
        self._last_digest: str | None = None
        self._fetching: tuple[asyncio.AbstractEventLoop, asyncio.Timeout] | None = None

    def stop(self) -> None:
        """Ask the run to end after the poll under way, whose fetch gets at most
        ``STOP_GRACE`` seconds more (safe from a signal handler)."""
        self._stopping.set()
        fetching = self._fetching
        if fetching is not None:
            loop, deadline = fetching
            loop.call_soon_threadsafe(_cut, loop, deadline)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self, every: float | None, polls: int | None = None) -> PollTotals:
        """Poll once (``every`` None) or every ``every`` seconds, until stopped or ``polls``."""
        done = 0
        while not self.stopping:
            started = time.monotonic()
            self.poll_once()
            done += 1
            if every is None or (polls is not None and done >= polls):
                break
            self._stopping.wait(max(0.0, every - (time.monotonic() - started)))
        return self.totals

    def poll_once(self) -> dict[str, Any] | None:
        """One poll: the upload's answer, or None when the feed failed or was unchanged."""
        self.totals.polls += 1
        body = self._fetch()
        if body is None:
            self.totals.failed += 1
            return None
        digest = hashlib.sha256(body).hexdigest()
        if digest == self._last_digest:
            self.totals.unchanged += 1
            log.info("feed unchanged since the last poll (%d bytes): nothing to add", len(body))
            return None
        try:
            with self.sessions.begin() as session:
                answer, _ = upload_records(
                    session, self.dataset_id, [body], self.options, hash_secret=self.hash_secret
                )
        except DPGateError as exc:  # garbage, or the dataset is gone: nothing was written
            self.totals.failed += 1
            log.warning("feed %s not ingested: %s", self.url, exc.message)
            return None
        except OperationalError as exc:  # the database is unreachable: rolled back
            self.totals.failed += 1
            log.warning("feed %s not ingested, the database failed: %s", self.url, exc.orig)
            return None
        self._last_digest = digest
        self.totals.accepted += answer["accepted"]
        self.totals.duplicates += answer["duplicates"]
        self.totals.rejected += answer["rejected"]
        log.info(
            "dataset %d: %d entities, %d new, %d already stored, %d rejected%s",
            self.dataset_id,
            answer["rows"],
            answer["accepted"],
            answer["duplicates"],
            answer["rejected"],
            "".join(f"; {e['reason']}" for e in answer["errors"][:3]),
        )
        return answer

    def _fetch(self) -> bytes | None:
        """The feed's bytes, or None (logged): down, an error, over ``max_bytes`` or not whole
        within ``timeout``."""
        return asyncio.run(self._fetch_within_timeout())

    async def _fetch_within_timeout(self) -> bytes | None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                self._fetching = (loop, deadline)
                if self.stopping:
                    _cut(loop, deadline)
                return await self._download()
        except TimeoutError:
            why = "stopping" if self.stopping else f"--timeout {self.timeout:g} s"
            log.warning("feed %s did not arrive whole in time (%s): skipped", self.url, why)
        except httpx.HTTPError as exc:
            log.warning("feed %s unreachable: %s", self.url, str(exc) or type(exc).__name__)
        finally:
            self._fetching = None
        return None

    async def _download(self) -> bytes | None:
        async with (
            httpx.AsyncClient(
                timeout=self.timeout,  # each step; asyncio.timeout bounds them together
                follow_redirects=True,
                headers={"Accept": ACCEPT},
                verify=self._tls,
            ) as client,
            client.stream("GET", self.url) as resp,
        ):
            if resp.status_code != 200:
                log.warning("feed %s answered %d; polling again", self.url, resp.status_code)
                return None
            parts, size = [], 0
            async for part in resp.aiter_bytes():
                size += len(part)
                if size > self.max_bytes:
                    log.warning("feed %s is over %d bytes: skipped", self.url, self.max_bytes)
                    return None
                parts.append(part)
        return b"".join(parts)


def _cut(loop: asyncio.AbstractEventLoop, deadline: asyncio.Timeout) -> None:
    """Bring a fetch's deadline to at most ``STOP_GRACE`` seconds from now."""
    when = loop.time() + STOP_GRACE
    current = deadline.when()
    deadline.reschedule(when if current is None else min(current, when))
