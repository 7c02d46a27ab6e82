"""A TCP proxy to Postgres that can freeze: a stopped (``SIGSTOP``) database server as
its clients see it, without stopping the shared server.

Frozen, the proxy stops reading and forwarding in both directions but keeps every
socket open: the kernel still accepts connections and acknowledges bytes (as it does
for a stopped server), and nothing ever answers. Thawed, it forwards what waited, as a
server resumed by ``SIGCONT`` would read it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy.engine import make_url


class FreezingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.loop = asyncio.new_event_loop()
        self.running = asyncio.Event()
        self.running.set()
        self.port = 0
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def start(self) -> None:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self.loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self.loop.call_soon_threadsafe(self.running.clear)

    def thaw(self) -> None:
        self.loop.call_soon_threadsafe(self.running.set)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def url_for(self, url: str) -> str:
        """``url`` (a SQLAlchemy URL of the target) pointed at this proxy instead."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(False)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.running.wait()  # frozen: the connection waits in the kernel's backlog
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self.running.wait()
                data = await reader.read(65536)
                await self.running.wait()  # bytes read just before a freeze wait too
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with suppress(ConnectionError, OSError):
                writer.close()


@contextmanager
def freezing_proxy(url: str) -> Iterator[FreezingProxy]:
    """A running proxy to the Postgres server of ``url``."""
    parsed = make_url(url)
    proxy = FreezingProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.thaw()
        proxy.stop()
