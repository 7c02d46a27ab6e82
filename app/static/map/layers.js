// Draws one slot of a release: the slot's occupied footprint faintly, the cells with too
// few buses hatched grey, and every released cell coloured by its mean speed.
import { certainty, colour } from "./legend.js";
import {
  coveringCell, h3Resolution, makeProjection, pathData, scaleBar, svgElement, tileLayer,
} from "./geo.js";
import { percent, plural, speed, speedInterval } from "./format.js";

const WIDTH = 960;
const HEIGHT = 640;
const LABEL_MIN_WIDTH = 44; // hexagons at least this wide (view units) show their value

// A label of the mean (m/s) at the centre of a released cell, dark or light for contrast;
// as precise as the value is sure (7.1, or ≈7 when its interval is wide or missing).
function valueLabel(cell, mean, kind, fill, view) {
  const ring = view.boundaries[cell].slice(0, -1).map(view.proj.point);
  const xs = ring.map((p) => p[0]);
  if (Math.max(...xs) - Math.min(...xs) < LABEL_MIN_WIDTH) return null;
  const [r, g, b] = fill.match(/\d+/g).map(Number);
  const label = svgElement("text", {
    x: (xs.reduce((a, v) => a + v, 0) / xs.length).toFixed(1),
    y: (ring.reduce((a, p) => a + p[1], 0) / ring.length).toFixed(1),
    class: `value ${0.299 * r + 0.587 * g + 0.114 * b > 140 ? "dark" : "light"}`,
    "text-anchor": "middle", "dominant-baseline": "central", "aria-hidden": "true",
  });
  label.textContent = kind === "sure" ? mean.toFixed(1) : `≈${mean.toFixed(0)}`;
  return label;
}

function describeCell(grid, view) {
  const mean = grid.mean;
  const lines = [];
  if (mean && Number.isFinite(mean.estimate)) {
    lines.push(`Mean speed ${speed(mean.estimate)}`);
    const kind = certainty(mean, view.U);
    if (kind === "none") {
      lines.push(`95% interval: none${mean.ci95_note ? ` (${mean.ci95_note})` : ""}`);
    } else {
      lines.push(`95% interval ${speedInterval(mean.ci95)}`);
      if (kind === "wide") {
        const width = mean.ci95[1] - mean.ci95[0];
        lines.push(`  wide: ${width.toFixed(1)} m/s, over 20% of the range`);
      }
    }
  } else {
    lines.push("No mean in this release");
  }
  const res = grid.h3_resolution ?? h3Resolution(grid.h3_cell);
  lines.push(`${plural(grid.n_users, "user")} in this cell and slot`);
  lines.push(`cell ${grid.h3_cell} (H3 resolution ${res})`);
  return lines.join("\n");
}

function describeSkipped(row, view) {
  return [
    "Too few buses: not released",
    `${plural(row.n_users, "user")} here in this slot; a release needs ${view.minUsers ?? "more"}`,
    `cell ${row.h3_cell}`,
  ].join("\n");
}

function shape(cell, view, attrs) {
  const ring = view.boundaries[cell];
  return ring ? svgElement("path", { d: pathData(ring, view.proj.point), ...attrs }) : null;
}

function interactive(el, text, hover) {
  const label = svgElement("title");
  label.textContent = text;
  el.append(label);
  el.setAttribute("tabindex", 0);
  el.addEventListener("mousemove", (e) => hover.show(e, text));
  el.addEventListener("focus", (e) => hover.show(e, text));
  el.addEventListener("mouseleave", hover.hide);
  el.addEventListener("blur", hover.hide);
  return el;
}

// view: {grids, footprint, boundaries, U, range, minUsers, tileUrl}; returns what was drawn.
export function drawSlot(svg, view, hover) {
  const released = new Map(view.grids.map((g) => [g.h3_cell, g]));
  const resolutions = [...new Set(view.grids.map((g) => g.h3_resolution ?? h3Resolution(g.h3_cell)))]
    .sort((a, b) => b - a);
  const cells = [...new Set([...view.footprint.map((r) => r.h3_cell), ...released.keys()])];
  view.proj = makeProjection(cells.map((c) => view.boundaries[c]).filter(Boolean), WIDTH, HEIGHT);
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${view.proj.width.toFixed(1)} ${view.proj.height.toFixed(1)}`);
  if (view.tileUrl) svg.append(tileLayer(view.tileUrl, view.proj));

  const footprint = svgElement("g", { class: "footprint-layer" });
  const skipped = svgElement("g", { class: "skipped-layer" });
  let records = 0, coveredRecords = 0;
  for (const row of view.footprint) {
    const el = shape(row.h3_cell, view, { class: "footprint", "data-cell": row.h3_cell });
    if (el) footprint.append(el);
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
    const mean = grid.mean;
    const hasMean = mean && Number.isFinite(mean.estimate);
    const kind = hasMean ? certainty(mean, view.U) : "none";
    const el = shape(grid.h3_cell, view, {
      class: "cell",
      "data-grid-id": grid.grid_id,
      "data-certainty": kind,
      fill: hasMean ? colour(mean.estimate, view.range, kind !== "sure") : "#cfcfcf",
    });
    if (!el) continue;
    layer.append(interactive(el, describeCell(grid, view), hover));
    if (kind === "none") {
      layer.append(shape(grid.h3_cell, view, { class: "hatch", "aria-hidden": "true" }));
    }
    const label = hasMean && valueLabel(grid.h3_cell, mean.estimate, kind, el.getAttribute("fill"), view);
    if (label) labels.append(label);
  }
  svg.append(footprint, skipped, layer, labels, scaleBar(view.proj));
  return {
    cells: layer.querySelectorAll(".cell").length,
    footprint: footprint.childElementCount,
    skipped: skipped.childElementCount,
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
