// Colours and the legend: a fixed scale over the value range, in m/s and km/h, and the
// swatches that say how sure each value is and where too few buses were.
import { svgElement } from "./geo.js";
import { KMH_PER_MS, roundForPeople } from "./format.js";

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
    x: 14, y: y + 2, width: 14, height: 8, fill: "#ececec", stroke: "#d8d8d8",
    "stroke-width": 4, "stroke-linejoin": "round",
  })];
}

// The legend for a colour scale [lo, hi] (m/s); `U` is the dataset's value bound.
export function drawLegend(legend, [lo, hi], U, fixed) {
  legend.replaceChildren();
  legend.setAttribute("viewBox", "0 0 370 176");
  const w = 290, x0 = 12;
  const grad = svgElement("linearGradient", { id: "mean-scale", x1: 0, x2: 1, y1: 0, y2: 0 });
  VIRIDIS.forEach((c, i) =>
    grad.append(svgElement("stop", { offset: i / (VIRIDIS.length - 1), "stop-color": c })));
  legend.append(svgElement("defs"), text(x0, 12, fixed
    ? `Mean speed (scale fixed: 0 to ${roundForPeople(U)} m/s, the dataset's range)`
    : "Mean speed (scale stretched to this release's values)", { class: "title" }));
  legend.firstChild.append(grad);
  legend.append(svgElement("rect", {
    x: x0, y: 18, width: w, height: 14, fill: "url(#mean-scale)", stroke: "#999",
  }));
  for (const v of niceTicks(lo, hi)) {
    const x = x0 + (hi > lo ? ((v - lo) / (hi - lo)) * w : w / 2);
    legend.append(
      svgElement("line", { x1: x, x2: x, y1: 32, y2: 36, stroke: "#555" }),
      text(x, 47, roundForPeople(v), { "text-anchor": "middle", class: "tick" }),
      text(x, 60, (v * KMH_PER_MS).toFixed(0), { "text-anchor": "middle", class: "tick kmh" }),
    );
  }
  legend.append(text(x0 + w + 20, 47, "m/s", { class: "unit" }),
    text(x0 + w + 20, 60, "km/h", { class: "unit kmh" }));
  const mid = colour((lo + hi) / 2, [lo, hi]);
  const washed = colour((lo + hi) / 2, [lo, hi], true);
  const rows = [
    [swatch, mid, "95% interval narrow: the colour can be trusted"],
    [swatch, washed,
      `washed out: interval wider than ${roundForPeople(WIDE_SHARE * U)} m/s (20% of the range)`],
    [swatch, washed, "hatched: no honest interval (hover for why)", "url(#hatch-none)"],
    [swatch, "url(#too-few)", "too few buses: not released"],
    [halo, null, "grey halo: where buses ran in this slot (public footprint)"],
  ];
  rows.forEach(([draw, fill, label, overlay], i) => {
    const y = 72 + 18 * i;
    legend.append(...draw(y, fill, overlay), text(x0 + 26, y + 10, label));
  });
  legend.append(text(x0, 172, "Numbers: mean speed in m/s (≈ when uncertain); hover for more.",
    { class: "hint" }));
}
