// dpgate release map: fetches GET /releases/{id}?format=geojson with the key as a bearer
// token and draws each grid's H3 hexagon as an SVG path coloured by its mean. No library,
// no tiles: lon/lat are projected here (equirectangular, x scaled by cos of the middle
// latitude), so the page loads nothing but this server's files.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const WIDTH = 960;
const HEIGHT = 640;
// Viridis at ten evenly spaced points (perceptually uniform, colour-blind safe).
const VIRIDIS = [
  "#440154", "#482878", "#3e4989", "#31688e", "#26828e",
  "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725",
];

const $ = (id) => document.getElementById(id);

function setState(state, message) {
  document.body.dataset.state = state;
  $("status").textContent = message;
}

function svgElement(name, attrs = {}) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function hexToRgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

// Colour of t in [0, 1], linear between the viridis stops.
function colourAt(t) {
  const x = Math.min(Math.max(t, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const a = hexToRgb(VIRIDIS[i]);
  const b = hexToRgb(VIRIDIS[i + 1]);
  const f = x - i;
  const mix = a.map((v, k) => Math.round(v + (b[k] - v) * f));
  return `rgb(${mix.join(",")})`;
}

function fmt(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  return Math.abs(x) >= 1000 ? x.toFixed(0) : x.toFixed(2);
}

function fmtInterval(ci) {
  return Array.isArray(ci) ? `[${fmt(ci[0])}, ${fmt(ci[1])}]` : "none";
}

function outerRings(feature) {
  const g = feature.geometry;
  if (!g) return [];
  if (g.type === "Polygon") return [g.coordinates[0]];
  if (g.type === "MultiPolygon") return g.coordinates.map((p) => p[0]);
  return [];
}

// Equirectangular projection of the bounding box into a WIDTH × HEIGHT view box.
function makeProjection(features) {
  let minLon = Infinity, maxLon = -Infinity, minLat = Infinity, maxLat = -Infinity;
  for (const f of features) {
    for (const ring of outerRings(f)) {
      for (const [lon, lat] of ring) {
        minLon = Math.min(minLon, lon); maxLon = Math.max(maxLon, lon);
        minLat = Math.min(minLat, lat); maxLat = Math.max(maxLat, lat);
      }
    }
  }
  const kx = Math.cos(((minLat + maxLat) / 2) * Math.PI / 180);
  const spanX = Math.max((maxLon - minLon) * kx, 1e-9);
  const spanY = Math.max(maxLat - minLat, 1e-9);
  const pad = 12;
  const scale = Math.min((WIDTH - 2 * pad) / spanX, (HEIGHT - 2 * pad) / spanY);
  const width = spanX * scale + 2 * pad;
  const height = spanY * scale + 2 * pad;
  return {
    width, height,
    point: ([lon, lat]) => [pad + (lon - minLon) * kx * scale, pad + (maxLat - lat) * scale],
  };
}

function pathData(rings, project) {
  return rings
    .map((ring) => "M" + ring.map((p) => project(p).map((v) => v.toFixed(2)).join(",")).join("L") + "Z")
    .join("");
}

function describe(p) {
  return [
    `grid ${p.grid_id}`,
    `cell ${p.h3_cell}`,
    `slot ${p.slot_start ?? "—"}`,
    `mean ${fmt(p.mean)}   95% interval ${fmtInterval(p.mean_ci95)}`,
    ...(p.variance === null || p.variance === undefined
      ? []
      : [`variance ${fmt(p.variance)}   95% interval ${fmtInterval(p.variance_ci95)}`]),
    `users ${p.n_users ?? "—"}`,
  ].join("\n");
}

function showTooltip(event, text) {
  const tip = $("tooltip");
  tip.textContent = text;
  tip.hidden = false;
  const box = event.target.getBoundingClientRect();
  const x = event.clientX ?? box.right;
  const y = event.clientY ?? box.top;
  tip.style.left = `${Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8)}px`;
  tip.style.top = `${Math.min(y + 14, window.innerHeight - tip.offsetHeight - 8)}px`;
}

function hideTooltip() {
  $("tooltip").hidden = true;
}

function drawLegend(lo, hi, nMeans) {
  const legend = $("legend");
  legend.replaceChildren();
  legend.setAttribute("viewBox", "0 0 340 56");
  if (nMeans === 0) {
    const none = svgElement("text", { x: 10, y: 28 });
    none.textContent = "this release has no mean: hexagons are grey";
    legend.append(none);
    return;
  }
  const grad = svgElement("linearGradient", { id: "mean-scale", x1: 0, x2: 1, y1: 0, y2: 0 });
  VIRIDIS.forEach((c, i) =>
    grad.append(svgElement("stop", { offset: i / (VIRIDIS.length - 1), "stop-color": c })));
  const defs = svgElement("defs");
  defs.append(grad);
  legend.append(defs);
  const title = svgElement("text", { x: 10, y: 12 });
  title.textContent = "mean (differentially private estimate)";
  legend.append(title, svgElement("rect", {
    x: 10, y: 18, width: 320, height: 14, fill: "url(#mean-scale)", stroke: "#999",
  }));
  for (let i = 0; i <= 4; i++) {
    const x = 10 + (320 * i) / 4;
    const tick = svgElement("text", {
      x, y: 46, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle",
    });
    tick.textContent = fmt(lo + ((hi - lo) * i) / 4);
    legend.append(svgElement("line", { x1: x, x2: x, y1: 32, y2: 36, stroke: "#555" }), tick);
  }
}

function draw(collection) {
  const features = collection.features || [];
  const map = $("map");
  map.replaceChildren();
  const means = features.map((f) => f.properties.mean).filter(Number.isFinite);
  const lo = means.length ? Math.min(...means) : 0;
  const hi = means.length ? Math.max(...means) : 1;
  const proj = makeProjection(features);
  map.setAttribute("viewBox", `0 0 ${proj.width.toFixed(1)} ${proj.height.toFixed(1)}`);
  for (const f of features) {
    const p = f.properties;
    const hasMean = Number.isFinite(p.mean);
    const path = svgElement("path", {
      d: pathData(outerRings(f), proj.point),
      class: hasMean ? "hex" : "hex no-value",
      tabindex: 0,
      "data-grid-id": p.grid_id,
    });
    if (hasMean) path.setAttribute("fill", colourAt(hi > lo ? (p.mean - lo) / (hi - lo) : 0.5));
    const text = describe(p);
    const label = svgElement("title");
    label.textContent = text;
    path.append(label);
    path.addEventListener("mousemove", (e) => showTooltip(e, text));
    path.addEventListener("focus", (e) => showTooltip(e, text));
    path.addEventListener("mouseleave", hideTooltip);
    path.addEventListener("blur", hideTooltip);
    map.append(path);
  }
  drawLegend(lo, hi, means.length);
  $("figure").hidden = false;
  return features.length;
}

function summary(collection, drawn) {
  const r = collection.release || {};
  const parts = [`Release ${r.release_id ?? ""}: ${drawn} grid${drawn === 1 ? "" : "s"} drawn`];
  if (r.skipped_grids !== undefined) parts.push(`${r.skipped_grids} skipped`);
  if (r.epsilon !== undefined) parts.push(`ε = ${r.epsilon} per grid`);
  if (r.max_user_cost !== undefined) parts.push(`largest cost per user ${r.max_user_cost}`);
  if (r.slot_start !== undefined) parts.push(`slot ${r.slot_start}`);
  return parts.join(" · ");
}

async function errorText(resp) {
  try {
    const body = await resp.json();
    if (body && body.error) return `${resp.status} ${body.error.code}: ${body.error.message}`;
  } catch (_) { /* not JSON */ }
  return `${resp.status} ${resp.statusText}`;
}

async function openRelease(releaseId, key) {
  setState("loading", `Loading release ${releaseId}…`);
  $("figure").hidden = true;
  hideTooltip();
  let resp;
  try {
    resp = await fetch(`/releases/${encodeURIComponent(releaseId)}?format=geojson`, {
      headers: { Authorization: `Bearer ${key}`, Accept: "application/geo+json" },
      cache: "no-store",
    });
  } catch (err) {
    setState("error", `Could not reach the server: ${err}`);
    return;
  }
  if (!resp.ok) {
    setState("error", `The release could not be loaded: ${await errorText(resp)}`);
    return;
  }
  const collection = await resp.json();
  const drawn = draw(collection);
  document.body.dataset.grids = String(drawn);
  setState("drawn", summary(collection, drawn));
}

// `#release=<id>&key=<key>`: draw straight away, then drop the key from the address bar
// (and so from the history) while keeping the release id.
function openFromFragment() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  const releaseId = params.get("release");
  const key = params.get("key");
  if (releaseId) $("release").value = releaseId;
  if (key) $("key").value = key;
  if (key) {
    history.replaceState(null, "", `#release=${encodeURIComponent(releaseId ?? "")}`);
  }
  if (releaseId && $("key").value) openRelease(releaseId, $("key").value);
}

document.addEventListener("DOMContentLoaded", () => {
  $("open-release").addEventListener("submit", (event) => {
    event.preventDefault();
    openRelease($("release").value.trim(), $("key").value.trim());
  });
  window.addEventListener("hashchange", openFromFragment);
  openFromFragment();
});
