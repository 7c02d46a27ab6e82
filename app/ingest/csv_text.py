"""CSV bytes as text: UTF-8 chunks decoded into blocks of whole lines (pure)."""

from __future__ import annotations

import codecs
import itertools
import operator
from collections.abc import Iterable, Iterator

__all__ = ["MAX_LINE_CHARS", "CsvFormatError", "iter_lines", "text_blocks"]

#: A physical line longer than this (characters) refuses the file.
MAX_LINE_CHARS = 1 << 20


class CsvFormatError(ValueError):
    """The file as a whole cannot be read as the expected CSV."""


def iter_lines(chunks: Iterable[bytes], max_line_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Decode UTF-8 chunks (a leading BOM dropped) into ``\\n``-terminated lines, holding one
    chunk and one partial line; an over-long line or bad UTF-8 raises :class:`CsvFormatError`."""
    for block in text_blocks(chunks, max_line_chars):
        lines = block.split("\n")
        last = lines.pop()  # "" after a final "\n", else the file's unterminated last line
        yield from map(operator.add, lines, itertools.repeat("\n"))
        if last:
            yield last


def text_blocks(chunks: Iterable[bytes], max_line_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The decoded text in blocks of whole ``\\n``-terminated lines, one per chunk that
    ends a line, then the last line if it has no ``\\n``; refusals as :func:`iter_lines`."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
    pending = ""
    offset = 0
    lineno = 0
    for chunk in itertools.chain(chunks, [None]):
        final = chunk is None
        try:
            text = decoder.decode(b"" if chunk is None else chunk, final=final)
        except UnicodeDecodeError as exc:
            raise CsvFormatError(
                f"the file is not valid UTF-8 (near byte {offset + exc.start}, after line {lineno})"
            ) from None
        offset += 0 if chunk is None else len(chunk)
        if not text:
            continue
        if pending:
            text = pending + text
        cut = text.rfind("\n") + 1
        pending = text[cut:]
        if len(pending) > max_line_chars:
            n = text.count("\n", 0, cut)
            raise CsvFormatError(f"line {lineno + n + 1} is longer than {max_line_chars}")
        if cut:
            if cut > max_line_chars:  # else no line of it can be too long
                lines = text[: cut - 1].split("\n")
                if max(map(len, lines)) > max_line_chars:
                    n = next(i for i, line in enumerate(lines) if len(line) > max_line_chars)
                    raise CsvFormatError(f"line {lineno + n + 1} is longer than {max_line_chars}")
            lineno += text.count("\n", 0, cut)
            yield text[:cut]
    if pending:
        yield pending
