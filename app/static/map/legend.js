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
const WASH = 0.6; // how far a washed-out colour moves towards white

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

function text(x, y, content, attrs = {}) {
  const el = svgElement("text", { x, y, ...attrs });
  el.textContent = content;
  return el;
}

function swatch(x, y, fill, overlay) {
  const box = { x, y, width: 18, height: 12, stroke: "#888", "stroke-width": 0.5 };
  const out = [svgElement("rect", { ...box, fill })];
  if (overlay) out.push(svgElement("rect", { ...box, fill: overlay }));
  return out;
}

// The legend for a colour scale [lo, hi] (m/s); `U` is the dataset's value bound.
export function drawLegend(legend, [lo, hi], U, fixed) {
  legend.replaceChildren();
  legend.setAttribute("viewBox", "0 0 380 176");
  const w = 300, x0 = 10;
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
  for (let i = 0; i <= 4; i++) {
    const x = x0 + (w * i) / 4;
    const v = lo + ((hi - lo) * i) / 4;
    const anchor = { "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" };
    legend.append(
      svgElement("line", { x1: x, x2: x, y1: 32, y2: 36, stroke: "#555" }),
      text(x, 47, roundForPeople(v), { ...anchor, class: "tick" }),
      text(x, 60, (v * KMH_PER_MS).toFixed(0), { ...anchor, class: "tick kmh" }),
    );
  }
  legend.append(text(x0 + w + 8, 47, "m/s", { class: "unit" }),
    text(x0 + w + 8, 60, "km/h", { class: "unit kmh" }));
  const mid = colour((lo + hi) / 2, [lo, hi]);
  const rows = [
    [swatch(x0, 72, mid), "95% interval narrow: the colour can be trusted"],
    [swatch(x0, 90, colour((lo + hi) / 2, [lo, hi], true)),
      `washed out: interval wider than ${roundForPeople(WIDE_SHARE * U)} m/s (20% of the range)`],
    [swatch(x0, 108, colour((lo + hi) / 2, [lo, hi], true), "url(#hatch-none)"),
      "hatched: no honest interval (hover for why)"],
    [swatch(x0, 126, "url(#too-few)"), "too few buses: not released"],
    [swatch(x0, 144, "#ececec"), "where buses ran in this slot (public footprint)"],
  ];
  for (const [shapes, label] of rows) {
    legend.append(...shapes, text(x0 + 26, Number(shapes[0].getAttribute("y")) + 10, label));
  }
  legend.append(text(x0, 172, "Hover or focus a hexagon for its value, interval and users.",
    { class: "hint" }));
}
