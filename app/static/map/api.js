// The few dpgate requests the map makes, with the key as a bearer token.
const PAGE = 1000;
const GRID_PAGE = 10000;
const MAX_RELEASES = 3000; // the chooser and the steps cover a dataset's newest releases

export class ApiError extends Error {}

async function errorText(resp) {
  try {
    const body = await resp.json();
    if (body && body.error) return `${resp.status} ${body.error.code}: ${body.error.message}`;
  } catch (_) { /* not JSON */ }
  return `${resp.status} ${resp.statusText}`;
}

export class Api {
  constructor(key) {
    this.key = key;
  }

  async request(path, { params, body } = {}) {
    const query = params ? `?${new URLSearchParams(params)}` : "";
    const init = { headers: { Authorization: `Bearer ${this.key}` }, cache: "no-store" };
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path + query, init);
    } catch (err) {
      throw new ApiError(`could not reach the server: ${err}`);
    }
    if (!resp.ok) throw new ApiError(await errorText(resp));
    return resp.json();
  }

  release(id) {
    return this.request(`/releases/${encodeURIComponent(id)}`);
  }

  dataset(id) {
    return this.request(`/datasets/${encodeURIComponent(id)}`);
  }

  // Every page of a listing (or the first `most` rows): `field` of each, following `next`.
  async allPages(path, field, params = {}, limit = PAGE, most = Infinity) {
    const rows = [];
    let offset = 0;
    while (offset !== null && offset !== undefined && rows.length < most) {
      const page = await this.request(path, { params: { ...params, limit, offset } });
      rows.push(...page[field]);
      offset = page.next;
    }
    return rows;
  }

  releases(datasetId) {
    const path = `/datasets/${encodeURIComponent(datasetId)}/releases`;
    return this.allPages(path, "releases", {}, PAGE, MAX_RELEASES);
  }

  // The slot's public occupancy (cells with their users and records) at the release's
  // resolution and slot length; coarser ones are asked for only when they differ.
  footprint(dataset, slotStart, h3Resolution, slotMinutes) {
    const params = { slot_start: slotStart };
    if (h3Resolution !== undefined && h3Resolution !== dataset.h3_resolution) {
      params.h3_resolution = h3Resolution;
    }
    if (slotMinutes !== undefined && slotMinutes !== dataset.timeslot_minutes) {
      params.slot_minutes = slotMinutes;
    }
    return this.allPages(`/datasets/${dataset.id}/grids`, "grids", params, GRID_PAGE);
  }

  // Boundaries ([lon, lat] rings) of H3 cells: geometry only, from POST /map/cells.
  async boundaries(cells) {
    const out = {};
    for (let i = 0; i < cells.length; i += 20000) {
      const page = await this.request("/map/cells", { body: { cells: cells.slice(i, i + 20000) } });
      Object.assign(out, page.cells);
    }
    return out;
  }
}
