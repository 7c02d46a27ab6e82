// Colours and the legend: a scale fitted to the values (or over 0–U), in the dataset's unit, and the
// swatches that say how sure each value is and where too few buses were.
import { svgElement } from "./geo.js";
import { roundForPeople } from "./format.js";

// Viridis at ten evenly spaced points (perceptually uniform, colour-blind safe).
const VIRIDIS = [
  "#440154", "#482878", "#3e4989", "#31688e", "#26828e",
  "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725",
];
// A mean whose 95% interval is wider than this share of the range is drawn washed out.
export const WIDE_SHARE = 0.2;
const WASH = 0.5; // how far a washed-out colour moves towards white

function hexToRgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

function rgbAt(t) {
  const x = Math.min(Math.max(t, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const a = hexToRgb(VIRIDIS[i]);
  const b = hexToRgb(VIRIDIS[i + 1]);
  return a.map((v, k) => v + (b[k] - v) * (x - i));
}

// Colour of a value on the scale [lo, hi]; `washed` moves it towards white.
export function colour(value, [lo, hi], washed = false) {
  const rgb = rgbAt(hi > lo ? (value - lo) / (hi - lo) : 0.5);
  const out = washed ? rgb.map((v) => v + (255 - v) * WASH) : rgb;
  return `rgb(${out.map(Math.round).join(",")})`;
}

// "sure", "wide" (interval over WIDE_SHARE of the range) or "none" (no honest interval).
export function certainty(mean, range) {
  const ci = mean && mean.ci95;
  if (!Array.isArray(ci)) return "none";
  return ci[1] - ci[0] > WIDE_SHARE * range ? "wide" : "sure";
}

// Round values (1, 2 or 5 × 10^k apart) across [lo, hi], at most seven of them.
function niceTicks(lo, hi) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / 6;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((s) => s >= raw);
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Number(v.toPrecision(12)));
  }
  return ticks;
}

function text(x, y, content, attrs = {}) {
  const el = svgElement("text", { x, y, ...attrs });
  el.textContent = content;
  return el;
}

function swatch(y, fill, overlay) {
  const box = { x: 12, y, width: 18, height: 12, stroke: "#888", "stroke-width": 0.5 };
  const out = [svgElement("rect", { ...box, fill })];
  if (overlay) out.push(svgElement("rect", { ...box, fill: overlay }));
  return out;
}

function halo(y) {
  return [svgElement("rect", {
    x: 14, y: y + 2, width: 14, height: 8, fill: "#e4e4e4", stroke: "#d0d0d0",
    "stroke-width": 2, "stroke-linejoin": "round",
  })];
}

// Round ends around [lo, hi] (the released values), so the colours use the whole ramp.
export function fittedRange(values) {
  if (!values.length) return null;
  const lo = Math.min(...values), hi = Math.max(...values);
  if (!(hi > lo)) return [Math.max(0, lo - 1), hi + 1];
  const ticks = niceTicks(lo, hi);
  const step = ticks.length > 1 ? ticks[1] - ticks[0] : hi - lo;
  return [Math.max(0, Math.floor(lo / step) * step), Math.ceil(hi / step) * step];
}

// The legend of the colour scale [lo, hi] in `unit`: fitted to the values drawn, or the
// dataset's whole range 0–U (`fixed`), as its title says.
export function drawLegend(legend, [lo, hi], U, fixed, unit, what) {
  legend.replaceChildren();
  legend.setAttribute("viewBox", "0 0 370 176");
  const w = 300, x0 = 12, u = unit ? ` ${unit}` : "";
  const grad = svgElement("linearGradient", { id: "mean-scale", x1: 0, x2: 1, y1: 0, y2: 0 });
  VIRIDIS.forEach((c, i) =>
    grad.append(svgElement("stop", { offset: i / (VIRIDIS.length - 1), "stop-color": c })));
  legend.append(svgElement("defs"), text(x0, 12, fixed
    ? `${what}${u ? ` (${unit})` : ""}: colours over 0–${roundForPeople(U)}${u}, the whole range`
    : `${what}${u ? ` (${unit})` : ""}: colours fitted to ${roundForPeople(lo)}–${roundForPeople(hi)}${u}`,
  { class: "title" }));
  legend.firstChild.append(grad);
  legend.append(svgElement("rect", {
    x: x0, y: 18, width: w, height: 14, fill: "url(#mean-scale)", stroke: "#999",
  }));
  for (const v of niceTicks(lo, hi)) {
    const x = x0 + (hi > lo ? ((v - lo) / (hi - lo)) * w : w / 2);
    legend.append(
      svgElement("line", { x1: x, x2: x, y1: 32, y2: 36, stroke: "#555" }),
      text(x, 47, roundForPeople(v), { "text-anchor": "middle", class: "tick" }),
    );
  }
  const mid = colour((lo + hi) / 2, [lo, hi]);
  const washed = colour((lo + hi) / 2, [lo, hi], true);
  const rows = [
    [swatch, mid, "95% interval narrow: the colour can be trusted"],
    [swatch, washed,
      `washed out: interval wider than ${roundForPeople(WIDE_SHARE * U)}${u} (20% of the range)`],
    [swatch, washed, "hatched: no honest interval (hover for why)", "url(#hatch-none)"],
    [swatch, "url(#too-few)", "occupied in this slot, too few users: not released"],
    [halo, null, "grey: every cell ever occupied (the dataset's footprint)"],
  ];
  rows.forEach(([draw, fill, label, overlay], i) => {
    const y = 62 + 18 * i;
    legend.append(...draw(y, fill, overlay), text(x0 + 26, y + 10, label));
  });
  legend.append(text(x0, 164, `Numbers: the value${u} (≈ when uncertain); hover or tap for more.`,
    { class: "hint" }));
}
