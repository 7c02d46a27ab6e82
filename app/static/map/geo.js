// Geometry of the map: H3 parents, a Web Mercator projection (so an optional tile layer
// lines up), the tile layer itself and a scale bar.
const SVG_NS = "http://www.w3.org/2000/svg";
const EARTH_CIRCUMFERENCE_M = 40075016.686;
const TILE_PX = 256;
const MAX_TILES = 64;

export function svgElement(name, attrs = {}) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

// H3 index bits (h3geo.org, "H3 index"): resolution at bits 52–55, then one 3-bit digit
// per resolution 1..15 from bit 42 down; digits finer than the resolution are 7.
export function h3Resolution(cell) {
  return Number((BigInt(`0x${cell}`) >> 52n) & 15n);
}

export function h3Parent(cell, res) {
  let h = BigInt(`0x${cell}`);
  if (res >= Number((h >> 52n) & 15n)) return cell;
  h = (h & ~(15n << 52n)) | (BigInt(res) << 52n);
  for (let r = res + 1; r <= 15; r++) h |= 7n << BigInt((15 - r) * 3);
  return h.toString(16);
}

// The released cell that holds `cell` (itself or an ancestor), or undefined.
export function coveringCell(cell, released, resolutions) {
  for (const res of resolutions) {
    const parent = h3Parent(cell, res);
    if (released.has(parent)) return parent;
  }
  return undefined;
}

function mercator([lon, lat]) {
  const phi = (Math.max(Math.min(lat, 85), -85) * Math.PI) / 180;
  return [(lon + 180) / 360, (1 - Math.log(Math.tan(phi) + 1 / Math.cos(phi)) / Math.PI) / 2];
}

// Fits every ring into width × height (padding, and room for the scale bar below).
export function makeProjection(rings, width, height, pad = 16, foot = 26) {
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity, latSum = 0, n = 0;
  for (const ring of rings) {
    for (const p of ring) {
      const [x, y] = mercator(p);
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
      latSum += p[1]; n += 1;
    }
  }
  if (!n) { x0 = 0; x1 = 1e-4; y0 = 0; y1 = 1e-4; }
  const scale = Math.min((width - 2 * pad) / Math.max(x1 - x0, 1e-12),
    (height - 2 * pad - foot) / Math.max(y1 - y0, 1e-12));
  const point = (p) => {
    const [x, y] = mercator(p);
    return [pad + (x - x0) * scale, pad + (y - y0) * scale];
  };
  return {
    width: (x1 - x0) * scale + 2 * pad,
    height: (y1 - y0) * scale + 2 * pad + foot,
    scale, pad, x0, y0,
    midLat: n ? latSum / n : 0,
    point,
  };
}

export function pathData(ring, project) {
  return "M" + ring.map((p) => project(p).map((v) => v.toFixed(1)).join(",")).join("L") + "Z";
}

// Raster tiles of the deployment's own tile server under the cells ({z}/{x}/{y}).
export function tileLayer(template, proj) {
  const group = svgElement("g", { class: "tiles" });
  const z = Math.max(0, Math.min(19, Math.round(Math.log2(proj.scale / TILE_PX))));
  const n = 2 ** z;
  const span = (from, size) => [Math.floor(from * n), Math.floor((from + size) * n)];
  const [tx0, tx1] = span(proj.x0 - proj.pad / proj.scale, proj.width / proj.scale);
  const [ty0, ty1] = span(proj.y0 - proj.pad / proj.scale, proj.height / proj.scale);
  if ((tx1 - tx0 + 1) * (ty1 - ty0 + 1) > MAX_TILES) return group;
  const side = proj.scale / n;
  for (let tx = tx0; tx <= tx1; tx++) {
    for (let ty = Math.max(ty0, 0); ty <= Math.min(ty1, n - 1); ty++) {
      const href = template.replaceAll("{z}", z).replaceAll("{x}", ((tx % n) + n) % n)
        .replaceAll("{y}", ty);
      group.append(svgElement("image", {
        href,
        x: (proj.pad + (tx / n - proj.x0) * proj.scale).toFixed(1),
        y: (proj.pad + (ty / n - proj.y0) * proj.scale).toFixed(1),
        width: side.toFixed(1), height: side.toFixed(1), preserveAspectRatio: "none",
      }));
    }
  }
  return group;
}

// A bar of a round length (1, 2 or 5 × 10^k m) about a fifth of the map wide, and "N ↑".
export function scaleBar(proj) {
  const metresPerUnit = (EARTH_CIRCUMFERENCE_M * Math.cos((proj.midLat * Math.PI) / 180)) / proj.scale;
  const target = (proj.width / 5) * metresPerUnit;
  const pow = 10 ** Math.floor(Math.log10(target));
  const metres = [5, 2, 1].map((m) => m * pow).find((m) => m <= target) ?? pow;
  const length = metres / metresPerUnit;
  const x = proj.pad, y = proj.height - 10;
  const group = svgElement("g", { class: "scale-bar" });
  group.append(
    svgElement("path", { d: `M${x},${y - 5}V${y}H${x + length}V${y - 5}` }),
    Object.assign(svgElement("text", { x: x + length + 6, y }), {
      textContent: metres >= 1000 ? `${metres / 1000} km` : `${metres} m`,
    }),
    Object.assign(svgElement("text", { x: proj.width - proj.pad, y, "text-anchor": "end" }), {
      textContent: "N ↑",
    }),
  );
  return group;
}
