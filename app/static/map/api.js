// The few dpgate requests the map makes: with the key as a bearer token, or with none
// for a public release.
const PAGE = 1000;
const MAX_RELEASES = 3000; // the chooser and the steps cover a dataset's newest releases

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

async function errorText(resp) {
  try {
    const body = await resp.json();
    if (body && body.error) return `${resp.status} ${body.error.code}: ${body.error.message}`;
  } catch (_) { /* not JSON */ }
  return `${resp.status} ${resp.statusText}`;
}

export class Api {
  constructor(key) {
    this.key = key || "";
  }

  async request(path, params) {
    const query = params ? `?${new URLSearchParams(params)}` : "";
    const headers = this.key ? { Authorization: `Bearer ${this.key}` } : {};
    let resp;
    try {
      resp = await fetch(path + query, { headers, cache: "no-cache" });
    } catch (err) {
      throw new ApiError(`could not reach the server: ${err}`, 0);
    }
    if (!resp.ok) throw new ApiError(await errorText(resp), resp.status);
    return resp.json();
  }

  release(id) {
    return this.request(`/releases/${encodeURIComponent(id)}`);
  }

  // The dataset's facts and whole public footprint (cells with their boundaries).
  footprint(id) {
    return this.request(`/releases/${encodeURIComponent(id)}/footprint`);
  }

  // One slot's occupied cells (users, records) at the release's resolution.
  async occupancy(id, slotStart) {
    const path = `/releases/${encodeURIComponent(id)}/occupancy`;
    return (await this.request(path, { slot_start: slotStart })).grids;
  }

  // The dataset's releases: every one with a key, the public ones without.
  async releases(datasetId) {
    const [path, params] = this.key
      ? [`/datasets/${encodeURIComponent(datasetId)}/releases`, {}]
      : ["/public/releases", { dataset: datasetId }];
    const rows = [];
    let offset = 0;
    while (offset !== null && offset !== undefined && rows.length < MAX_RELEASES) {
      const page = await this.request(path, { ...params, limit: PAGE, offset });
      rows.push(...page.releases);
      offset = page.next;
    }
    return rows;
  }
}
