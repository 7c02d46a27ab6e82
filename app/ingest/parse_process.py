"""Parsing a large upload in a child process (from a preloaded ``forkserver``), pipelined with the
writes in this one (docs/architecture.md).

The waits form a chain, never a cycle: the caller sends chunks down the input pipe (waits for the
child), the child sends pickled batches down the output pipe (waits for the receiver), a receiving
thread hands them to ``consume`` (waits for the database). A death closes pipe ends, failing the
neighbour's send or read; a child silent for :data:`STALL_SECONDS` is killed; on any error the
caller terminates and joins the child (SIGKILL after :data:`GRACE_SECONDS`), then the receiver."""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any, Literal

from app.ingest.batches import Batch
from app.ingest.csv_records import CsvFormatError, ParseOptions, RecordReader
from app.ingest.gtfs_realtime import FeedFormatError, FeedReader

__all__ = ["GRACE_SECONDS", "STALL_SECONDS", "ParseProcessError", "feed_pieces", "parse_in_child"]

#: How long a child may take to exit (after its last message, or SIGTERM) before SIGKILL.
GRACE_SECONDS = 5.0
#: A child silent for this long (no batch, no end) is taken as hung and killed. It is
#: silent while it waits for the body, or reads rows that are all rejected.
STALL_SECONDS = 600.0
#: The capacity asked for each pipe.
PIPE_BYTES = 1 << 20
#: The body goes to the child in messages of about this size.
SEND_BYTES = 256 << 10
#: A joined feed goes to the child in pieces of this size.
FEED_PIECE = 1 << 20
#: A CSV's first batch is this part of the others: the database starts on it sooner.
FIRST_BATCH_PART = 5

_context = multiprocessing.get_context("forkserver")
# The fork server imports this module (with numpy, h3, protobuf and the readers) and loads
# the compiled readers once, before it forks any child; ``__main__`` as Python does.
_context.set_forkserver_preload(["__main__", __name__, "app.ingest.preload"])


class ParseProcessError(RuntimeError):
    """The parsing process died or failed unexpectedly: a server-side error."""


def parse_in_child(
    chunks: Iterable[bytes | memoryview],
    fmt: Literal["csv", "gtfs-rt"],
    options: ParseOptions,
    batch_rows: int,
    consume: Callable[[Batch], None],
) -> None:
    """Parse ``chunks`` in a child, calling ``consume`` on a helper thread with each batch in
    order. Raises the reader's format errors as they are, ``consume``'s or ``chunks``' error, or
    :class:`ParseProcessError`; on return the child and thread are gone."""
    child_in, inbox = _context.Pipe(duplex=False)
    outbox, child_out = _context.Pipe(duplex=False)
    for conn in (inbox, outbox):
        _widen(conn)
    process = _context.Process(
        target=_child_main,
        args=(child_in, child_out, fmt, options, batch_rows),
        name="dpgate-parse",
        daemon=True,
    )
    try:
        process.start()
    except BaseException:
        for conn in (inbox, outbox):
            conn.close()
        raise
    finally:
        child_in.close()  # the child has its own copies: its death must close the pipes
        child_out.close()
    receiver = _Receiver(outbox, consume, process.kill)
    receiver.start()
    done = False
    try:
        for piece in _pieces(chunks):
            if receiver.error is not None:
                break
            try:
                inbox.send_bytes(piece)
            except OSError:  # the child is gone; the receiver knows why
                break
        inbox.close()  # the end of the body
        receiver.join()  # bounded: the child ends, or dies and the output pipe reads EOF
        done = receiver.ended
    finally:
        inbox.close()
        if not done and process.exitcode is None:
            process.terminate()
        process.join(GRACE_SECONDS)
        if process.exitcode is None:
            process.kill()
            process.join()
        receiver.join()  # after the child is gone: EOF at the latest
        exitcode = process.exitcode
        process.close()
    if receiver.error is not None:
        raise receiver.error
    if not done:
        raise ParseProcessError(
            f"the parsing process ended without finishing the upload (exit code {exitcode})"
        )


def _pieces(chunks: Iterable[bytes | memoryview]) -> Iterator[bytes | bytearray | memoryview]:
    """The body in messages of about :data:`SEND_BYTES`: fewer wake-ups of either side."""
    pending = bytearray()
    for chunk in chunks:
        if not pending and len(chunk) >= SEND_BYTES:
            yield chunk
            continue
        pending += chunk
        if len(pending) >= SEND_BYTES:
            yield pending
            pending = bytearray()
    if pending:
        yield pending


def _widen(conn: Connection) -> None:
    """Let a pipe hold :data:`PIPE_BYTES` (Linux), so that each side runs ahead of the
    other by a few chunks rather than one; elsewhere, or past the system's cap, as is."""
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


class _Receiver(threading.Thread):
    """Takes the child's messages: batches for ``consume``, then the end or a failure."""

    def __init__(
        self, outbox: Connection, consume: Callable[[Batch], None], kill: Callable[[], None]
    ) -> None:
        super().__init__(name="dpgate-parse-receiver", daemon=True)
        self._outbox = outbox
        self._consume = consume
        self._kill = kill
        self.ended = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                if not self._outbox.poll(STALL_SECONDS):  # a hung child: free the caller
                    self.error = ParseProcessError(
                        f"the parsing process sent nothing for {STALL_SECONDS:g} s"
                    )
                    self._kill()
                    return
                message = self._outbox.recv()
                if isinstance(message, Batch):
                    self._consume(message)
                    continue
                kind, detail = message
                if kind == "refused":  # a format error, raised again here as it was
                    self.error = detail
                elif kind == "failed":
                    self.error = ParseProcessError(f"the parsing process failed: {detail}")
                else:
                    self.ended = True
                return
        except EOFError:
            pass  # the child died: the caller says so, with its exit code
        except BaseException as exc:  # from consume: re-raised by the caller
            self.error = exc
        finally:
            self._outbox.close()  # a child still sending gets EPIPE and exits


def _child_main(
    child_in: Connection,
    child_out: Connection,
    fmt: Literal["csv", "gtfs-rt"],
    options: ParseOptions,
    batch_rows: int,
) -> None:
    """The child: read the body from ``child_in``, send batches down ``child_out``."""
    # A session of its own, as each Postgres backend has: where the scheduler shares the
    # CPU by session (autogroup), the child then gets a share rather than halving ours.
    with contextlib.suppress(OSError):
        os.setsid()

    def chunks() -> Iterator[bytes]:
        while True:
            try:
                yield child_in.recv_bytes()
            except EOFError:
                return

    message: tuple[str, Any]
    try:
        reader = (
            FeedReader(b"".join(chunks()), options)
            if fmt == "gtfs-rt"
            else RecordReader(chunks(), options)
        )
        batches = (
            reader.batches(batch_rows)
            if isinstance(reader, FeedReader)
            else reader.batches(batch_rows, max(1, batch_rows // FIRST_BATCH_PART))
        )
        for batch in batches:
            child_out.send(batch)
        message = ("end", None)
    except (CsvFormatError, FeedFormatError) as exc:
        message = ("refused", exc)
    except BrokenPipeError:
        return  # the parent stopped listening
    except Exception:
        message = ("failed", traceback.format_exc(limit=-3))
    with contextlib.suppress(BrokenPipeError):
        child_out.send(message)


def feed_pieces(body: bytes) -> Iterator[memoryview]:
    """A joined body in pieces of :data:`FEED_PIECE` bytes, to send to the child."""
    view = memoryview(body)
    for start in range(0, len(view), FEED_PIECE):
        yield view[start : start + FEED_PIECE]
