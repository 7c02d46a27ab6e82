// dpgate release map: asks dpgate (with the key as a bearer token) for a stored release,
// its dataset, the dataset's releases and the slot's public occupancy, and draws them as
// SVG. No library and, unless a tile server is configured, nothing from anywhere else.
import { Api, ApiError } from "./api.js";
import { drawLegend } from "./legend.js";
import { coverageText, drawSlot } from "./layers.js";
import { plural, roundForPeople, shortSlot, slotLabel } from "./format.js";

const $ = (id) => document.getElementById(id);
const state = { api: null, dataset: null, releases: [], steps: [], view: null };

function setState(name, message) {
  document.body.dataset.state = name;
  $("status").textContent = message;
}

const hover = {
  show(event, text) {
    const tip = $("tooltip");
    tip.textContent = text;
    tip.hidden = false;
    const box = event.target.getBoundingClientRect();
    const x = event.clientX ?? box.right;
    const y = event.clientY ?? box.top;
    tip.style.left = `${Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8)}px`;
    tip.style.top = `${Math.min(y + 14, window.innerHeight - tip.offsetHeight - 8)}px`;
  },
  hide() {
    $("tooltip").hidden = true;
  },
};

const instant = (iso) => Date.parse(iso);

// The starts of a release's slots (one unless it says otherwise).
function slotStarts(slotStart, slots, minutes) {
  const first = instant(slotStart);
  return Array.from({ length: Math.max(slots ?? 1, 1) }, (_, k) =>
    k === 0 ? slotStart : new Date(first + k * (minutes ?? 60) * 60000).toISOString());
}

// Every slot with a release, in time order; a slot released twice shows the newest.
function stepsOf(releases) {
  const bySlot = new Map();
  for (const r of releases) { // newest first
    for (const slot of slotStarts(r.slot_start, r.slots, r.slot_minutes)) {
      if (!bySlot.has(instant(slot))) bySlot.set(instant(slot), { release: r.release_id, slot });
    }
  }
  return [...bySlot.entries()].sort((a, b) => a[0] - b[0]).map(([, step]) => step);
}

function releaseLabel(r) {
  const extra = [r.partition !== "fixed" ? r.partition : "", r.slots > 1 ? `${r.slots} slots` : ""]
    .filter(Boolean).map((s) => ` · ${s}`).join("");
  return `${slotLabel(r.slot_start, r.slot_minutes)} · ε ${roundForPeople(r.epsilon)} · ` +
    `${plural(r.n_grids, "cell")}${extra}`;
}

function fillChooser(current) {
  const select = $("releases");
  const sorted = [...state.releases].sort((a, b) => instant(a.slot_start) - instant(b.slot_start));
  select.replaceChildren(...sorted.map((r) => {
    const option = new Option(releaseLabel(r), r.release_id, false, r.release_id === current);
    option.title = `release ${r.release_id}, made ${r.created_at}`;
    return option;
  }));
}

function fillSteps(slot) {
  const i = state.steps.findIndex((s) => instant(s.slot) === instant(slot));
  for (const [id, step, arrow] of [["prev-slot", state.steps[i - 1], "◀"], ["next-slot", state.steps[i + 1], "▶"]]) {
    const button = $(id);
    button.disabled = i < 0 || !step;
    button.textContent = step ? (arrow === "◀" ? `◀ ${shortSlot(step.slot, slot)}` : `${shortSlot(step.slot, slot)} ▶`) : arrow;
    button.dataset.release = step ? step.release : "";
    button.dataset.slot = step ? step.slot : "";
  }
}

function fact(term, value) {
  const dt = document.createElement("dt");
  const dd = document.createElement("dd");
  dt.textContent = term;
  dd.textContent = value;
  return [dt, dd];
}

function render() {
  const v = state.view;
  const r = v.release;
  const means = v.grids.map((g) => g.mean?.estimate).filter(Number.isFinite);
  const stretch = $("stretch").checked && means.length > 1;
  v.range = stretch ? [Math.min(...means), Math.max(...means)] : [0, v.U];
  const drawn = drawSlot($("map"), v, hover);
  drawLegend($("legend"), v.range, v.U, !stretch);
  Object.assign(document.body.dataset, {
    grids: drawn.cells, footprint: drawn.footprint, skipped: drawn.skipped,
  });
  const minutes = r.slot_minutes ?? state.dataset.timeslot_minutes;
  $("facts").replaceChildren(
    ...fact("Dataset", `${state.dataset.name} (#${state.dataset.id})`),
    ...fact("Slot", slotLabel(v.slot, minutes) + (r.slots > 1 ? ` (one of ${r.slots})` : "")),
    ...fact("Released", `${plural(drawn.cells, "cell")}; ` + (drawn.skipped
      ? `${drawn.skipped} more had too few buses (under ${r.min_users ?? "min_users"} users)`
      : "every occupied cell had enough buses")),
    ...fact("Privacy", `ε = ${roundForPeople(r.epsilon)} per cell, ` +
      `cost per user at most ${roundForPeople(r.max_user_cost)}`),
    ...fact("Coverage", coverageText(r, drawn)),
  );
  $("facts").hidden = false;
  $("figure").hidden = false;
  setState("drawn", `Release ${r.release_id}: ${plural(drawn.cells, "cell")} drawn, ` +
    `${drawn.skipped} with too few buses.`);
}

async function openRelease(releaseId, key, slot) {
  setState("loading", `Loading release ${releaseId}…`);
  hover.hide();
  try {
    const api = state.api?.key === key ? state.api : new Api(key);
    const release = await api.release(releaseId);
    if (api !== state.api || state.dataset?.id !== release.dataset_id ||
        !state.releases.some((r) => r.release_id === releaseId)) {
      [state.dataset, state.releases] = await Promise.all(
        [api.dataset(release.dataset_id), api.releases(release.dataset_id)]);
      state.steps = stepsOf(state.releases);
    }
    state.api = api;
    const minutes = release.slot_minutes ?? state.dataset.timeslot_minutes;
    const slots = slotStarts(release.slot_start, release.slots, minutes);
    const at = slots.find((s) => instant(s) === instant(slot ?? "")) ?? slots[0];
    const grids = release.grids.filter((g) => instant(g.slot_start ?? release.slot_start) === instant(at));
    const footprint = await api.footprint(state.dataset, at, release.h3_resolution, release.slot_minutes);
    const cells = [...new Set([...footprint.map((f) => f.h3_cell), ...grids.map((g) => g.h3_cell)])];
    const boundaries = await api.boundaries(cells);
    state.view = {
      release, grids, footprint, boundaries, slot: at,
      U: state.dataset.value_bound, minUsers: release.min_users,
      tileUrl: document.querySelector('meta[name="dpgate-tile-url"]')?.content,
    };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    setState("error", `The release could not be loaded: ${err.message}`);
    return;
  }
  $("release").value = releaseId;
  history.replaceState(null, "", `#release=${encodeURIComponent(releaseId)}`);
  fillChooser(releaseId);
  fillSteps(state.view.slot);
  $("browse").hidden = false;
  render();
}

// `#release=<id>&key=<key>`: draw straight away, then drop the key from the address bar
// (and so from the history) while keeping the release id.
function openFromFragment() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  const releaseId = params.get("release");
  const key = params.get("key");
  if (releaseId) $("release").value = releaseId;
  if (key) $("key").value = key;
  if (key) history.replaceState(null, "", `#release=${encodeURIComponent(releaseId ?? "")}`);
  if (releaseId && $("key").value) openRelease(releaseId, $("key").value);
}

document.addEventListener("DOMContentLoaded", () => {
  $("open-release").addEventListener("submit", (event) => {
    event.preventDefault();
    openRelease($("release").value.trim(), $("key").value.trim());
  });
  $("releases").addEventListener("change", (e) => openRelease(e.target.value, state.api.key));
  for (const id of ["prev-slot", "next-slot"]) {
    $(id).addEventListener("click", (e) => {
      const { release, slot } = e.currentTarget.dataset;
      if (release) openRelease(release, state.api.key, slot);
    });
  }
  $("stretch").addEventListener("change", () => state.view && render());
  window.addEventListener("hashchange", openFromFragment);
  openFromFragment();
});
