// Numbers and times as a person reads them: rounded, with units.
export const KMH_PER_MS = 3.6;

// Two significant digits below 10, three above: ε = 0.89, cost 7.1, 12.5, 140.
export function roundForPeople(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  if (x === 0) return "0";
  const digits = Math.abs(x) < 10 ? 2 : 3;
  return String(Number(x.toPrecision(digits)));
}

export function metresPerSecond(x) {
  return Number.isFinite(x) ? `${x.toFixed(1)} m/s` : "—";
}

export function kilometresPerHour(x) {
  return Number.isFinite(x) ? `${(x * KMH_PER_MS).toFixed(0)} km/h` : "—";
}

// "7.1 m/s (26 km/h)"
export function speed(x) {
  return Number.isFinite(x) ? `${metresPerSecond(x)} (${kilometresPerHour(x)})` : "—";
}

// "5.2–9.0 m/s (19–32 km/h)"
export function speedInterval([lo, hi]) {
  const kmh = (v) => (v * KMH_PER_MS).toFixed(0);
  return `${lo.toFixed(1)}–${hi.toFixed(1)} m/s (${kmh(lo)}–${kmh(hi)} km/h)`;
}

export function percent(share) {
  if (!Number.isFinite(share)) return "—";
  const p = share * 100;
  return p > 0 && p < 1 ? "<1%" : p < 100 && p > 99 ? ">99%" : `${Math.round(p)}%`;
}

export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

// A slot start as the API writes it ("2024-03-05T08:00:00+01:00", local time with its
// offset) read without the browser's own time zone: {date, time, offset}.
export function localParts(iso) {
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$/.exec(iso ?? "");
  if (!m) return { date: iso ?? "", time: "", offset: "" };
  return { date: m[1], time: m[2], offset: m[3] === "Z" ? "+00:00" : m[3] ?? "" };
}

function addMinutes(time, minutes) {
  const [h, m] = time.split(":").map(Number);
  const total = (h * 60 + m + minutes) % 1440;
  return `${String(Math.floor(total / 60)).padStart(2, "0")}:${String(total % 60).padStart(2, "0")}`;
}

// "Tue 2024-03-05, 08:00–09:00 (UTC+01:00)"
export function slotLabel(iso, minutes) {
  const { date, time, offset } = localParts(iso);
  if (!time) return date;
  const weekday = new Date(`${date}T12:00:00Z`).toLocaleDateString("en-GB", {
    weekday: "short", timeZone: "UTC",
  });
  const end = Number.isFinite(minutes) ? `–${addMinutes(time, minutes)}` : "";
  return `${weekday} ${date}, ${time}${end}${offset ? ` (UTC${offset})` : ""}`;
}

// "08:00" (or "03-05 08:00" when the date differs from `sameDay`'s)
export function shortSlot(iso, sameDay) {
  const { date, time } = localParts(iso);
  return date === localParts(sameDay).date ? time : `${date.slice(5)} ${time}`;
}
