// Draws one slot of a release: the dataset's whole footprint faintly (where its users ever
// went: the streets), the slot's cells with too few users hatched grey, and every released
// cell coloured by its value.
import { certainty, colour } from "./legend.js";
import {
  coveringCell, h3Resolution, makeProjection, pathData, scaleBar, svgElement, tileLayer,
} from "./geo.js";
import { interval, percent, plural, value } from "./format.js";

const WIDTH = 960;
const HEIGHT = 640;
const NAMES = { mean: "Mean", user_mean: "Mean per user", variance: "Variance" };
export const statName = (stat) => NAMES[stat] ?? stat;

// A label of the value at the centre of a released cell that has room for one, dark or
// light for contrast, as precise as the value is sure (7.1, or ≈7 when its interval is
// wide or missing); its size follows the cell's.
function valueLabel(cell, est, kind, fill, view) {
  const ring = view.rings[cell].slice(0, -1).map(view.proj.point);
  const xs = ring.map((p) => p[0]);
  const width = Math.max(...xs) - Math.min(...xs);
  const text = kind === "sure" ? est.toFixed(1) : `≈${est.toFixed(0)}`;
  const size = Math.min(14, width / (0.62 * text.length + 0.8));
  if (size * view.pxPerUnit < 7) return null; // under 7 px on screen: no room
  const [r, g, b] = fill.match(/\d+/g).map(Number);
  const label = svgElement("text", {
    x: (xs.reduce((a, v) => a + v, 0) / xs.length).toFixed(1),
    y: (ring.reduce((a, p) => a + p[1], 0) / ring.length).toFixed(1),
    class: `value ${0.299 * r + 0.587 * g + 0.114 * b > 140 ? "dark" : "light"}`,
    "font-size": size.toFixed(1),
    "text-anchor": "middle", "dominant-baseline": "central", "aria-hidden": "true",
  });
  label.textContent = text;
  return label;
}

function describeCell(grid, view) {
  const answer = grid[view.stat];
  const lines = [view.slotText];
  if (answer && Number.isFinite(answer.estimate)) {
    lines.push(`${statName(view.stat)} ${value(answer.estimate, view.unit)}`);
    const kind = certainty(answer, view.U);
    if (kind === "none") {
      lines.push(`95% interval: none${answer.ci95_note ? ` (${answer.ci95_note})` : ""}`);
    } else {
      lines.push(`95% interval ${interval(answer.ci95, view.unit)}`);
      if (kind === "wide") lines.push("  wide: over 20% of the range");
    }
  } else {
    lines.push(`No ${statName(view.stat).toLowerCase()} in this release`);
  }
  const res = grid.h3_resolution ?? h3Resolution(grid.h3_cell);
  lines.push(`${plural(grid.n_users, "user")} in this cell and slot`);
  lines.push(`cell ${grid.h3_cell} (H3 resolution ${res})`);
  return lines.join("\n");
}

function describeSkipped(row, view) {
  return [
    view.slotText,
    "Too few users: not released",
    `${plural(row.n_users, "user")} here in this slot; a release needs ${view.minUsers ?? "more"}`,
    `cell ${row.h3_cell}`,
  ].join("\n");
}

function shape(cell, view, attrs) {
  const ring = view.rings[cell];
  return ring ? svgElement("path", { d: pathData(ring, view.proj.point), ...attrs }) : null;
}

function interactive(el, text, hover) {
  const label = svgElement("title");
  label.textContent = text;
  el.append(label);
  el.setAttribute("tabindex", 0);
  el.addEventListener("mousemove", (e) => hover.show(e, text));
  el.addEventListener("click", (e) => hover.show(e, text));
  el.addEventListener("focus", (e) => hover.show(e, text));
  el.addEventListener("mouseleave", hover.hide);
  el.addEventListener("blur", hover.hide);
  return el;
}

// view: {grids, occupancy, footprint, rings, U, unit, stat, range, minUsers, tileUrl,
// slotText}; returns what was drawn. The view is fitted to the slot's cells
// (the whole footprint when it has none); the footprint is drawn around them as context.
export function drawSlot(svg, view, hover) {
  const released = new Map(view.grids.map((g) => [g.h3_cell, g]));
  const resolutions = [...new Set(view.grids.map((g) => g.h3_resolution ?? h3Resolution(g.h3_cell)))]
    .sort((a, b) => b - a);
  const slotCells = [...new Set([...view.occupancy.map((r) => r.h3_cell), ...released.keys()])];
  const fitted = slotCells.length ? slotCells : view.footprint;
  view.proj = makeProjection(fitted.map((c) => view.rings[c]).filter(Boolean), WIDTH, HEIGHT);
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${view.proj.width.toFixed(1)} ${view.proj.height.toFixed(1)}`);
  const box = svg.getBoundingClientRect(); // laid out with its new aspect: screen px per unit
  view.pxPerUnit = box.width ? Math.min(box.width / view.proj.width, box.height / view.proj.height) : 1;
  if (view.tileUrl) svg.append(tileLayer(view.tileUrl, view.proj));

  const inView = (ring) => ring.some(([lon, lat]) => {
    const [x, y] = view.proj.point([lon, lat]);
    return x > -50 && y > -50 && x < view.proj.width + 50 && y < view.proj.height + 50;
  });
  const context = view.footprint.map((c) => view.rings[c]).filter((r) => r && inView(r));
  const footprint = svgElement("path", {
    class: "footprint", d: context.map((r) => pathData(r, view.proj.point)).join(""),
    "data-cells": context.length,
  });
  const skipped = svgElement("g", { class: "skipped-layer" });
  let records = 0, coveredRecords = 0;
  for (const row of view.occupancy) {
    records += row.n_records ?? 0;
    if (coveringCell(row.h3_cell, released, resolutions) !== undefined) {
      coveredRecords += row.n_records ?? 0;
    } else {
      const hole = shape(row.h3_cell, view, { class: "skipped", "data-cell": row.h3_cell });
      if (hole) skipped.append(interactive(hole, describeSkipped(row, view), hover));
    }
  }

  const layer = svgElement("g", { class: "released-layer" });
  const labels = svgElement("g", { class: "labels" });
  for (const grid of view.grids) {
    const answer = grid[view.stat];
    const has = answer && Number.isFinite(answer.estimate);
    const kind = has ? certainty(answer, view.U) : "none";
    const el = shape(grid.h3_cell, view, {
      class: "cell",
      "data-grid-id": grid.grid_id,
      "data-certainty": kind,
      fill: has ? colour(answer.estimate, view.range, kind !== "sure") : "#cfcfcf",
    });
    if (!el) continue;
    layer.append(interactive(el, describeCell(grid, view), hover));
    if (kind === "none") {
      layer.append(shape(grid.h3_cell, view, { class: "hatch", "aria-hidden": "true" }));
    }
    const label = has && valueLabel(grid.h3_cell, answer.estimate, kind, el.getAttribute("fill"), view);
    if (label) labels.append(label);
  }
  svg.append(footprint, skipped, layer, labels, scaleBar(view.proj));
  return {
    cells: layer.querySelectorAll(".cell").length,
    footprint: context.length,
    skipped: skipped.childElementCount,
    labels: labels.childElementCount,
    recordShare: records ? coveredRecords / records : NaN,
  };
}

// One line on how much of the slot the release covers (its own figures when it has them).
export function coverageText(release, drawn) {
  const c = release.coverage;
  if (c && Number.isFinite(c.records)) {
    const users = Number.isFinite(c.users) ? ` and ${percent(c.users)} of its users` : "";
    return `${percent(c.records)} of the slot's records${users} lie in released cells`;
  }
  if (!Number.isFinite(drawn.recordShare)) return "no records in this slot";
  return `${percent(drawn.recordShare)} of the slot's records lie in released cells ` +
    "(counted from the public footprint)";
}
