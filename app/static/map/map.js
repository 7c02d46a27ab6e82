// dpgate release map: asks dpgate for a stored release (with a key, or without one when
// it is public), its dataset's footprint and each slot's occupancy, and draws them as SVG
// in the dataset's local time. No library and, unless a tile server is configured,
// nothing from anywhere else.
import { Api, ApiError } from "./api.js";
import { drawLegend, fittedRange } from "./legend.js";
import { coverageText, drawSlot, statName } from "./layers.js";
import {
  instant, plural, profileLabel, roundForPeople, shortSlot, slotLabel,
} from "./format.js";

const $ = (id) => document.getElementById(id);
const state = { api: null, context: null, releases: [], steps: [], view: null };

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
    tip.style.left = `${Math.max(4, Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8))}px`;
    tip.style.top = `${Math.max(4, Math.min(y + 14, window.innerHeight - tip.offsetHeight - 8))}px`;
  },
  hide() {
    $("tooltip").hidden = true;
  },
};

const minutesOf = (r, dataset) => r.slot_minutes ?? dataset.timeslot_minutes;

// The instants (ms) of a release's slots; none for a profile (a typical day).
function slotsOf(r, dataset) {
  const first = instant(r.slot_start);
  if (r.profile || !Number.isFinite(first)) return [];
  return Array.from({ length: Math.max(r.slots ?? 1, 1) },
    (_, k) => first + k * minutesOf(r, dataset) * 60000);
}

// Every slot with a release, in time order; a slot released twice shows the newest.
function stepsOf(releases, dataset) {
  const bySlot = new Map();
  for (const r of releases) { // newest first
    for (const ms of slotsOf(r, dataset)) {
      if (!bySlot.has(ms)) bySlot.set(ms, { release: r.release_id, ms });
    }
  }
  return [...bySlot.values()].sort((a, b) => a.ms - b.ms);
}

function whenOf(r, dataset) {
  if (r.profile) return profileLabel(r.profile, r.slot_start);
  const ms = instant(r.slot_start);
  return Number.isFinite(ms) ? slotLabel(ms, minutesOf(r, dataset), dataset.timezone) : r.slot_start;
}

function releaseLabel(r, dataset) {
  const extra = [r.partition !== "fixed" ? r.partition : "", r.slots > 1 ? `${r.slots} slots` : ""]
    .filter(Boolean).map((s) => ` · ${s}`).join("");
  return `${whenOf(r, dataset)} · ε ${roundForPeople(r.epsilon)} · ${plural(r.n_grids, "cell")}${extra}`;
}

function fillChooser(current, dataset) {
  const select = $("releases");
  const order = (r) => (Number.isFinite(instant(r.slot_start)) ? instant(r.slot_start) : Infinity);
  const sorted = [...state.releases].sort((a, b) => order(a) - order(b));
  if (!sorted.some((r) => r.release_id === current.release_id)) sorted.push(current);
  select.replaceChildren(...sorted.map((r) => {
    const option = new Option(releaseLabel(r, dataset), r.release_id, false, r.release_id === current.release_id);
    option.title = `release ${r.release_id}${r.created_at ? `, made ${r.created_at}` : ""}`;
    return option;
  }));
}

function fillSteps(ms, tz) {
  const i = state.steps.findIndex((s) => s.ms === ms);
  for (const [id, step, arrow] of [["prev-slot", state.steps[i - 1], "◀"], ["next-slot", state.steps[i + 1], "▶"]]) {
    const button = $(id);
    const label = step ? shortSlot(step.ms, ms, tz) : "";
    button.disabled = i < 0 || !step;
    button.textContent = step ? (arrow === "◀" ? `◀ ${label}` : `${label} ▶`) : arrow;
    button.dataset.release = step ? step.release : "";
    button.dataset.slot = step ? String(step.ms) : "";
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
  const dataset = state.context.dataset;
  const values = r.grids.map((g) => g[v.stat]?.estimate).filter(Number.isFinite);
  const fixed = $("fixed-scale").checked || !values.length;
  v.range = fixed ? [0, v.U] : fittedRange(values);
  $("figure").hidden = false;
  const drawn = drawSlot($("map"), v, hover);
  drawLegend($("legend"), v.range, v.U, fixed, v.unit, statName(v.stat));
  Object.assign(document.body.dataset, {
    grids: drawn.cells, footprint: drawn.footprint, skipped: drawn.skipped, labels: drawn.labels,
  });
  const unitName = dataset.privacy_unit;
  $("facts").replaceChildren(
    ...fact("Dataset", dataset.name),
    ...fact(r.profile ? "Typical day" : "Slot", v.slotText + (r.slots > 1 ? ` (one of ${r.slots})` : "")),
    ...fact("Released", `${plural(drawn.cells, "cell")}` + (drawn.skipped
      ? `; ${drawn.skipped} more had too few users (under ${r.min_users ?? "min_users"})` : "")),
    ...fact("Privacy", `ε = ${roundForPeople(r.epsilon)} per cell, ` +
      `cost per ${unitName} at most ${roundForPeople(r.max_user_cost)}`),
    ...fact("Coverage", coverageText(r, drawn)),
  );
  $("facts").hidden = false;
  const share = $("share");
  share.hidden = !state.context.public;
  $("public-link").value = `${location.origin}/map#release=${encodeURIComponent(r.release_id)}`;
  setState("drawn", `${v.slotText}: ${plural(drawn.cells, "cell")} drawn` +
    (drawn.skipped ? `, ${drawn.skipped} with too few users.` : "."));
}

// The slot to open: the one asked for, else the first with released cells.
function openingSlot(release, slots, asked) {
  if (asked !== undefined && slots.includes(asked)) return asked;
  const withCells = new Set(release.grids.map((g) => instant(g.slot_start ?? release.slot_start)));
  return slots.find((ms) => withCells.has(ms)) ?? slots[0];
}

async function openRelease(releaseId, key, askedSlot) {
  setState("loading", `Loading release ${releaseId}…`);
  hover.hide();
  try {
    const api = state.api?.key === (key || "") ? state.api : new Api(key);
    const release = await api.release(releaseId);
    if (api !== state.api || state.context?.releaseId !== releaseId) {
      const context = await api.footprint(releaseId);
      const sameDataset = state.context?.dataset.id === context.dataset.id && api === state.api;
      state.context = { ...context, releaseId };
      if (!sameDataset || !state.releases.some((r) => r.release_id === releaseId)) {
        state.releases = await api.releases(context.dataset.id).catch(() => []);
        state.steps = stepsOf(state.releases, context.dataset);
      }
    }
    state.api = api;
    const dataset = state.context.dataset;
    const slots = slotsOf(release, dataset);
    const at = release.profile ? undefined : openingSlot(release, slots, askedSlot);
    const grids = at === undefined ? release.grids
      : release.grids.filter((g) => instant(g.slot_start ?? release.slot_start) === at);
    const occupancy = at === undefined ? []
      : await api.occupancy(releaseId, new Date(at).toISOString());
    const stats = ["mean", "user_mean", "variance"];
    state.view = {
      release, grids, occupancy, slot: at,
      footprint: state.context.footprint, rings: state.context.rings,
      U: dataset.value_bound, unit: dataset.value_unit, minUsers: release.min_users,
      stat: stats.find((s) => release.grids.some((g) => g[s])) ?? "mean",
      slotText: at === undefined ? whenOf(release, dataset)
        : slotLabel(at, minutesOf(release, dataset), dataset.timezone),
      tileUrl: document.querySelector('meta[name="dpgate-tile-url"]')?.content,
    };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    if (err.status === 401 && !key) {
      setState("needs-key", `Release ${releaseId} is not public: enter an API key to draw it.`);
      $("release").value = releaseId;
      $("key").focus();
      return;
    }
    setState("error", `The release could not be loaded: ${err.message}`);
    return;
  }
  $("release").value = releaseId;
  history.replaceState(null, "", `#release=${encodeURIComponent(releaseId)}`);
  fillChooser(state.view.release, state.context.dataset);
  fillSteps(state.view.slot, state.context.dataset.timezone);
  $("browse").hidden = false;
  render();
}

// `#release=<id>&key=<key>`: draw straight away (without a key when the release is
// public), then drop the key from the address bar (and so from the history).
function openFromFragment() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  const releaseId = params.get("release");
  const key = params.get("key");
  if (releaseId) $("release").value = releaseId;
  if (key) $("key").value = key;
  if (key) history.replaceState(null, "", `#release=${encodeURIComponent(releaseId ?? "")}`);
  if (releaseId) openRelease(releaseId, $("key").value.trim());
}

async function copyLink() {
  const input = $("public-link");
  try {
    await navigator.clipboard.writeText(input.value);
  } catch (_) { // no clipboard here (a plain-HTTP page): select it for the reader to copy
    input.select();
    document.execCommand?.("copy");
  }
  $("copy-link").textContent = "Copied";
  setTimeout(() => { $("copy-link").textContent = "Copy"; }, 1500);
}

document.addEventListener("DOMContentLoaded", () => {
  $("open-release").addEventListener("submit", (event) => {
    event.preventDefault();
    openRelease($("release").value.trim(), $("key").value.trim());
  });
  $("releases").addEventListener("change", (e) => openRelease(e.target.value, state.api?.key));
  for (const id of ["prev-slot", "next-slot"]) {
    $(id).addEventListener("click", (e) => {
      const { release, slot } = e.currentTarget.dataset;
      if (release) openRelease(release, state.api?.key, Number(slot));
    });
  }
  $("fixed-scale").addEventListener("change", () => state.view && render());
  $("copy-link").addEventListener("click", copyLink);
  window.addEventListener("hashchange", openFromFragment);
  openFromFragment();
});
