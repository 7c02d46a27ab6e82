// Numbers and times as a person reads them: rounded, with the dataset's unit, and every
// time in the dataset's own time zone (Intl, built into the browser: nothing is loaded).

// Two significant digits below 10, three above: ε = 0.89, cost 7.1, 12.5, 140.
export function roundForPeople(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  if (x === 0) return "0";
  const digits = Math.abs(x) < 10 ? 2 : 3;
  return String(Number(x.toPrecision(digits)));
}

const withUnit = (text, unit) => (unit ? `${text} ${unit}` : text);

// "7.1 km/h" (one decimal: a speed, a count per hour)
export function value(x, unit) {
  return Number.isFinite(x) ? withUnit(x.toFixed(1), unit) : "—";
}

// "5.2–9.0 km/h"
export function interval([lo, hi], unit) {
  return withUnit(`${lo.toFixed(1)}–${hi.toFixed(1)}`, unit);
}

export function percent(share) {
  if (!Number.isFinite(share)) return "—";
  const p = share * 100;
  return p > 0 && p < 1 ? "<1%" : p < 100 && p > 99 ? ">99%" : `${Math.round(p)}%`;
}

export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

export const instant = (iso) => Date.parse(iso);

// An instant (ms) in `timeZone`: {weekday, date, time, offset}, e.g. Tue, 2024-03-05,
// 08:00, UTC−06:00 (the offset of that instant: DST days change it).
export function localParts(ms, timeZone) {
  const parts = Object.fromEntries(new Intl.DateTimeFormat("en-GB", {
    timeZone, weekday: "short", year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "longOffset",
  }).formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
  const offset = parts.timeZoneName === "GMT" ? "UTC+00:00" : parts.timeZoneName.replace("GMT", "UTC").replace("-", "−");
  return {
    weekday: parts.weekday,
    date: `${parts.year}-${parts.month}-${parts.day}`,
    time: `${parts.hour}:${parts.minute}`,
    offset,
  };
}

const DAYS = { all: "day", weekdays: "weekday", weekends: "weekend day" };
const WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

// "typical weekday 08:00, 20 days" (a profile: one typical day over many dates)
export function profileLabel(profile, timeOfDay) {
  const days = Array.isArray(profile.days)
    ? profile.days.map((d) => WEEKDAYS[d - 1]).join("/")
    : DAYS[profile.days] ?? "day";
  const over = profile.n_days ? `, ${plural(profile.n_days, "day")}` : "";
  return `typical ${days} ${String(timeOfDay).slice(0, 5)}${over}`;
}

// "Tue 2024-03-05, 08:00–09:00 (UTC−06:00)" for the slot starting at `ms`
export function slotLabel(ms, minutes, timeZone) {
  const start = localParts(ms, timeZone);
  const end = localParts(ms + minutes * 60000, timeZone);
  return `${start.weekday} ${start.date}, ${start.time}–${end.time} (${start.offset})`;
}

// "08:00" (or "03-05 08:00" when the date differs from `sameDayMs`'s)
export function shortSlot(ms, sameDayMs, timeZone) {
  const here = localParts(ms, timeZone);
  return here.date === localParts(sameDayMs, timeZone).date ? here.time
    : `${here.date.slice(5)} ${here.time}`;
}
