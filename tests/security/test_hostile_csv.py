"""Hand-written hostile CSV uploads: a BOM, unreadable files, the wrong delimiter,
invalid UTF-8 after many rows. Each is read or refused with the documented error shape
and a refused upload writes nothing (the other hostile requests: test_hostile_inputs.py)."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from tests.security.support import World, assert_error, n_records, post_csv

GOOD_ROW = "bomuser,2024-03-05T11:00:01Z,30.2672,-97.7431,3.5\n"
HEADER = "user_id,timestamp,lat,lon,value\n"


def test_csv_with_bom_is_read(client: TestClient, world: World) -> None:
    before = n_records(client, world)
    resp = post_csv(client, world.dataset_id, b"\xef\xbb\xbf" + (HEADER + GOOD_ROW).encode())
    assert resp.status_code == 200, resp.text
    assert resp.json()["accepted"] == 1 and resp.json()["rejected"] == 0
    assert n_records(client, world) == before + 1


UNREADABLE_CSV = [
    ("wrong delimiter", (HEADER + GOOD_ROW).replace(",", ";").encode(), {}),
    ("declared delimiter is not the file's", (HEADER + GOOD_ROW).encode(), {"delimiter": ";"}),
    ("missing header", GOOD_ROW.encode() * 3, {}),
    ("empty file", b"", {}),
    ("only blank lines", b"\n\n\r\n", {}),
    ("header lacks a column", b"user_id,timestamp,lat,lon\nu,1,2,3\n", {}),
    ("duplicate header column", (HEADER.strip() + ",value\n" + GOOD_ROW).encode(), {}),
    ("invalid UTF-8 in a cell", HEADER.encode() + b"u\xff\xfe,2024,1,1,1\n", {}),
    ("invalid UTF-8 in the header", b"user\xc3_id,timestamp,lat,lon,value\n", {}),
    ("truncated UTF-8 at the end", (HEADER + GOOD_ROW).encode() + b"\xe2\x82", {}),
    ("UTF-16", (HEADER + GOOD_ROW).encode("utf-16"), {}),
    ("10^6 empty columns", b"," * (10**6 - 1) + b"\n", {}),
    ("10^6 named columns", ",".join(f"c{i}" for i in range(10**6)).encode() + b"\n", {}),
    ("a row of 10^6 columns", (HEADER + "," * (10**6 - 1) + "\n").encode(), {}),
    ("one 2 MB line", HEADER.encode() + b"u," + b"9" * 2_000_000 + b"\n", {}),
]  # fmt: skip


def test_unreadable_csv_is_refused_and_writes_nothing(client: TestClient, world: World) -> None:
    before = n_records(client, world)
    for name, body, params in UNREADABLE_CSV:
        started = time.monotonic()
        resp = post_csv(client, world.dataset_id, body, **params)
        assert resp.status_code == 400, (name, resp.text)
        assert_error(resp, 400, "invalid_request")
        assert time.monotonic() - started < 10, name
        assert n_records(client, world) == before, name


def test_the_right_delimiter_reads_the_same_file(client: TestClient, world: World) -> None:
    body = (HEADER + GOOD_ROW).replace(",", ";").encode()
    resp = post_csv(client, world.dataset_id, body, delimiter=";")
    assert resp.status_code == 200 and resp.json()["accepted"] == 1, resp.text


def test_invalid_utf8_after_many_rows_rolls_back_everything(
    client: TestClient, world: World
) -> None:
    """The first batches are already flushed when the bad byte arrives: all of it goes."""
    before = n_records(client, world)
    rows = "".join(
        f"bulk{i % 50},2024-03-05T12:{(i // 60) % 60:02d}:{i % 60:02d}Z,30.2672,-97.7431,1\n"
        for i in range(60_000)
    )
    body = (HEADER + rows).encode() + b"late,2024-03-05T12:00:00Z,1,1,\xff\n"
    resp = post_csv(client, world.dataset_id, body)
    assert_error(resp, 400, "invalid_request")
    assert "UTF-8" in resp.json()["error"]["message"]
    assert n_records(client, world) == before
