"""``dpgate ingest gtfs-rt URL --dataset N [--every S]``: pull a GTFS-Realtime feed into a
dataset, on the database directly (like ``dpgate keys``)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType

from app.cli.support import (
    LOG_LEVELS,
    DefaultsHelp,
    StartupRefused,
    integer,
    migrated_engine,
    number,
    settings_or_refusal,
)

log = logging.getLogger("dpgate.ingest")


#: Seconds between polls and for one fetch: positive and finite (a day at most).
_SECONDS = number(0, 86400, above=True)


def _gtfs_rt(args: argparse.Namespace) -> int:
    from app.datasets.repository import DatasetRepository
    from app.db.engine import make_sessionmaker
    from app.instance.service import SecretMismatch, resolve_hashing_secret
    from app.kit.errors import InvalidRequest
    from app.observability.logs import configure_logging
    from app.uploads.feed_poller import FeedPoller
    from app.uploads.service import UploadOptions, check_value_filters

    settings = settings_or_refusal()
    configure_logging(settings.log_format, args.log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll is ours
    options = UploadOptions(
        format="gtfs-rt", drop_zero=args.drop_zero, out_of_range=args.out_of_range
    )
    with migrated_engine(settings) as engine:
        try:
            secret = resolve_hashing_secret(settings, engine)
        except SecretMismatch as exc:
            raise StartupRefused(str(exc)) from None
        sessions = make_sessionmaker(engine)
        with sessions() as session:
            dataset = DatasetRepository(session).get(args.dataset)
            try:
                if dataset is None:
                    raise InvalidRequest(f"no dataset {args.dataset}")
                check_value_filters(dataset, options)
            except InvalidRequest as exc:
                print(f"dpgate ingest gtfs-rt: {exc.message}", file=sys.stderr)
                return 2
        poller = FeedPoller(
            sessions,
            args.dataset,
            args.url,
            hash_secret=secret,
            options=options,
            timeout=args.timeout,
            max_bytes=settings.max_body_bytes,
        )

        def stop(signum: int, _frame: FrameType | None) -> None:
            log.info("%s: stopping after the poll under way", signal.Signals(signum).name)
            poller.stop()

        previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            totals = poller.run(args.every, args.polls)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    log.info(
        "stopped after %d poll(s): %d records added, %d already stored, %d rejected, "
        "%d poll(s) failed",
        totals.polls,
        totals.accepted,
        totals.duplicates,
        totals.rejected,
        totals.failed,
    )
    # polled once and it failed: say so to a scheduler; a long run that was stopped is fine
    return 1 if args.every is None and totals.failed else 0


def add_ingest(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser(
        "ingest", help="pull records from a live feed into a dataset"
    ).add_subparsers(dest="ingest", required=True, metavar="{gtfs-rt}")
    gtfs = ingest.add_parser(
        "gtfs-rt",
        help="poll a GTFS-Realtime vehicle-positions feed into a dataset",
        description="Fetch a GTFS-Realtime FeedMessage from URL (once, or every --every "
        "seconds) and add its vehicle positions to a dataset of the database of "
        "DPGATE_DATABASE_URL (default: the embedded one), as POST /datasets/{id}/records "
        "would: vehicle id = user, position.speed = value (m/s), vehicle.timestamp (else "
        "the header's) = time. A position already stored (same vehicle, same timestamp) "
        "is a duplicate, not a new record. A feed that is down or sends garbage is "
        "logged and polled again; --timeout bounds each whole fetch (connect, headers and "
        "body). SIGINT or SIGTERM stops after the poll under way (committed, or rolled "
        "back; its fetch gets at most 1 s more), exit 0. One log line per poll. Exit 1 when the "
        "only poll (no --every) failed, 2 when the dataset does not exist or refuses "
        "the value filters asked for.",
        formatter_class=DefaultsHelp,
    )
    gtfs.add_argument("url", help="the feed's URL (http or https)")
    gtfs.add_argument("--dataset", type=integer(1), required=True, help="the dataset's id")
    gtfs.add_argument(
        "--every",
        type=_SECONDS,
        default=None,
        help="poll every this many seconds until stopped (default: poll once)",
    )
    gtfs.add_argument(
        "--polls",
        type=integer(1),
        default=None,
        help="with --every, stop after this many polls (default: until stopped)",
    )
    gtfs.add_argument(
        "--timeout",
        type=_SECONDS,
        default=30.0,
        help="seconds one fetch of the feed may take in all (connect, headers and body)",
    )
    gtfs.add_argument(
        "--drop-zero",
        action="store_true",
        help="drop zero speeds (default: kept; needs value_filters_public: true)",
    )
    gtfs.add_argument(
        "--out-of-range",
        choices=("clamp", "reject"),
        default="clamp",
        help="speeds outside [0, value_bound]: clamp, or reject (needs value_filters_public)",
    )
    gtfs.add_argument(
        "--log-level", default="info", choices=LOG_LEVELS, help="least severe level logged"
    )
    gtfs.set_defaults(func=_gtfs_rt)
