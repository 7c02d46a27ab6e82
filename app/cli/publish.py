"""``dpgate publish``: one local day's slots (23 or 25 on a daylight-saving day), or a typical
day (``--profile``), in one release through a running server (the ``dpgate`` client). Its
``Idempotency-Key`` is made from the dataset, the day and the options, so a repeated run is
answered from the stored release and charged once; exit codes per ``app.cli.support``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from app.cli.support import (
    EXIT_CODES,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    CommandFailed,
    DefaultsHelp,
    add_server_options,
    integer,
    local_day,
    number,
    server,
)

if TYPE_CHECKING:
    import dpgate


def add_publish(sub: Any) -> None:
    publish = sub.add_parser(
        "publish",
        help="release every slot of one local day in one release (for cron)",
        description="Release every slot of one local day of a dataset in one release, "
        "through a running server; run twice, charged once. " + EXIT_CODES,
        formatter_class=DefaultsHelp,
    )
    add_server_options(publish, "analyst or admin")
    publish.add_argument("--dataset", type=integer(1), required=True, help="the dataset's id")
    publish.add_argument(
        "--day",
        type=local_day,
        default=None,
        help="the local day, YYYY-MM-DD (with --profile: the last date pooled, default "
        "yesterday in the dataset's time zone)",
    )
    publish.add_argument(
        "--profile",
        default=None,
        metavar="DAYS",
        type=profile_days,
        help="a typical day instead: pool the chosen dates (all, weekdays, weekends, or ISO "
        "weekdays like 1,2,3) of the --weeks weeks up to --day",
    )
    publish.add_argument(
        "--weeks", type=integer(1, 52), default=4, help="with --profile: weeks pooled"
    )
    publish.add_argument(
        "--time", type=time_of_day, default="00:00", help="with --profile: first slot, HH:MM"
    )
    publish.add_argument(
        "--slots",
        type=integer(1, 1440),
        default=None,
        help="with --profile: slots from --time (default: to midnight)",
    )
    budget = publish.add_mutually_exclusive_group(required=True)
    budget.add_argument(
        "--max-user-cost", type=number(1e-6, 1e6), help="the most any user pays in all"
    )
    budget.add_argument("--epsilon", type=number(1e-6, 1e6), help="the epsilon of every grid")
    publish.add_argument(
        "--partition",
        choices=("fixed", "adaptive"),
        default="fixed",
        help="one resolution, or each area at the finest its traffic supports",
    )
    publish.add_argument("--min-users", type=integer(1), default=10, help="skip smaller grids")
    publish.add_argument(
        "--h3-resolution",
        type=integer(0, 15),
        default=None,
        help="coarser cells (default: the dataset's)",
    )
    publish.add_argument(
        "--coarsest-resolution",
        type=integer(0, 15),
        default=None,
        help="adaptive only (default: res-3)",
    )
    publish.add_argument(
        "--statistics",
        nargs="+",
        choices=("mean", "variance"),
        default=["mean", "variance"],
        help="the statistics of every grid",
    )
    publish.add_argument(
        "--timeout", type=number(0, 86400, above=True), default=600.0, help="seconds per attempt"
    )
    publish.set_defaults(func=_publish)


def day_slots(day: date, timezone: str, slot_minutes: int) -> int:
    """The slots of ``slot_minutes`` in the local ``day`` (DST days are shorter or longer)."""
    zone = ZoneInfo(timezone)
    # in UTC: Python subtracts two times of one zone by their wall clocks
    start = datetime.combine(day, time(0), zone).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0), zone).astimezone(UTC)
    return int((end - start) / timedelta(minutes=slot_minutes))


def profile_days(text: str) -> str | list[int]:
    """``all``, ``weekdays``, ``weekends`` or ISO weekdays ``1,2,3``."""
    if text in ("all", "weekdays", "weekends"):
        return text
    try:
        days = sorted({int(d) for d in text.split(",")})
    except ValueError:
        days = []
    if not days or not all(1 <= d <= 7 for d in days):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give all, weekdays, weekends or ISO weekdays 1-7 like 1,2,3"
        )
    return days


def time_of_day(text: str) -> str:
    """A local time of day ``HH:MM``."""
    try:
        parsed = time.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or len(text) != 5:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time of day HH:MM")
    return text


def profile_body(args: argparse.Namespace, last: date, slot_minutes: int) -> dict[str, Any]:
    """A typical day: ``--weeks`` weeks of the chosen dates up to ``last``."""
    first = last - timedelta(days=7 * args.weeks - 1)
    hour, minute = (int(p) for p in args.time.split(":"))
    slots = args.slots or (1440 - 60 * hour - minute) // slot_minutes
    profile = {"from": first.isoformat(), "to": last.isoformat(), "days": args.profile}
    return _options(args, {"slot_start": args.time, "slots": slots, "profile": profile})


def _options(args: argparse.Namespace, when: dict[str, Any]) -> dict[str, Any]:
    body = {
        **when,
        "epsilon": args.epsilon,
        "max_user_cost": args.max_user_cost,
        "partition": args.partition,
        "min_users": args.min_users,
        "h3_resolution": args.h3_resolution,
        "coarsest_resolution": args.coarsest_resolution,
        "statistics": args.statistics,
    }
    return {k: v for k, v in body.items() if v is not None}


def idempotency_key(dataset_id: int, body: dict[str, Any]) -> str:
    text = json.dumps({"dataset": dataset_id, **body}, sort_keys=True)
    return "publish-" + hashlib.sha256(text.encode()).hexdigest()[:40]


def _progress(release: dict[str, Any]) -> None:
    """One line per slot on the terminal (stderr): its grids and how many were released."""
    per_slot: dict[str, int] = {}
    for grid in release.get("grids", []):
        per_slot[grid["slot_start"]] = per_slot.get(grid["slot_start"], 0) + 1
    for slot, n in sorted(per_slot.items()):
        print(f"  {slot}  {n} grid(s) released", file=sys.stderr)


def budget_advice(url: str, exc: dpgate.BudgetExhausted) -> str:
    """The refusal, with ``largest_epsilon`` and the ``--epsilon`` that fits now."""
    largest = exc.largest_epsilon
    if not largest:
        fits = (
            "largest_epsilon = 0: no epsilon fits now; an admin can open a new budget epoch "
            "(dpgate budget reset) or raise the key's quota"
        )
    else:  # repr: the exact number the server sent, which fits
        fits = f"largest_epsilon = {largest!r} per grid: --epsilon {largest!r} would fit now"
    return f"refused by {url}: {exc.message}\n{fits}"


def _body(args: argparse.Namespace, dataset: dict[str, Any]) -> dict[str, Any]:
    minutes = int(dataset["timeslot_minutes"])
    if args.profile is None:
        if args.day is None:
            raise CommandFailed(EXIT_USAGE, "give --day (or --profile for a typical day)")
        slots = day_slots(args.day, dataset["timezone"], minutes)
        return _options(args, {"slot_start": f"{args.day.isoformat()}T00:00:00", "slots": slots})
    last = args.day
    if last is None:
        last = datetime.now(ZoneInfo(dataset["timezone"])).date() - timedelta(days=1)
    return profile_body(args, last, minutes)


def epsilon_text(release: dict[str, Any]) -> str:
    """The grids' epsilon as released: ``epsilon X per grid``, or with per-cell epsilon
    (docs/math.md §6.10; the release's ``epsilon`` is then the quantum) the range of the
    grids' own epsilons, each the sum of its statistics'."""
    asked = ("mean", "variance", "user_mean")
    grids = [
        sum(g[s]["epsilon"] for s in asked if isinstance(g.get(s), dict))
        for g in release.get("grids", [])
    ]
    if not grids:
        return f"epsilon {release['epsilon']:.4g} per grid"
    low, high = min(grids), max(grids)
    if high <= low * (1 + 1e-9):
        return f"epsilon {high:.4g} per grid"
    return f"per-cell epsilon {low:.4g} to {high:.4g} (whole quanta of {release['epsilon']:.4g})"


def useful_lines(release: dict[str, Any]) -> list[str]:
    """The useful share and each warning, one line each."""
    useful = release.get("useful")
    lines = []
    if isinstance(useful, dict) and useful.get("records") is not None:
        lines.append(
            f"useful: {100 * useful['records']:.0f}% of the records in {useful['cells']} "
            f"cell(s) whose ci95 is at most {useful['width']:g} wide"
        )
    lines += [f"warning: {w}" for w in release.get("warnings") or []]
    return lines


def _publish(args: argparse.Namespace) -> int:
    import dpgate

    with server(args, timeout=args.timeout) as client:
        dataset = client.request("GET", f"/datasets/{args.dataset}")
        body = _body(args, dataset)
        try:
            release = client.request(
                "POST",
                f"/datasets/{args.dataset}/releases",
                json=body,
                idempotent_key=idempotency_key(args.dataset, body),
            )
        except dpgate.BudgetExhausted as exc:
            raise CommandFailed(EXIT_REFUSED, budget_advice(args.url, exc)) from None
    _progress(release)
    cached = " (already released: nothing charged)" if release.get("cached") else ""
    profile = release.get("profile")
    what = (
        f"typical day {profile['from']} to {profile['to']} ({profile['n_days']} dates)"
        if profile
        else str(args.day)
    )
    print(
        f"release {release['release_id']}: {what} dataset {args.dataset}, "
        f"{release.get('slots', 1)} slots, {len(release['grids'])} grids, "
        f"{epsilon_text(release)}, max user cost {release['max_user_cost']:.4g}{cached}"
    )
    for line in useful_lines(release):
        print(line)
    return EXIT_OK
