// Vigil's dashboard: plain JavaScript, no build step, no dependency (docs/dashboard.md, ADR 0023).
// Everything it shows comes from this node's /v1 API with the operator token the user typed;
// the fleet list is read once, then kept live by the event stream, re-reading only the agents
// the events name. Text from the API is only ever set as textContent, never parsed as HTML.

import { $, TOKEN_KEY, TICK_MS, state } from "./state.js";
import { ApiError } from "./api.js";
import { buildHead, setText, applyFilter } from "./fleet.js";
import { loadFleet, streamNote, followEvents, tick } from "./live.js";
import { showAgent, wireActions } from "./agent.js";

// ---- Sign-in, routing --------------------------------------------------------------------------
export function show(section) {
  for (const id of ["sign-in", "fleet", "agent"]) $(id).hidden = id !== section;
  $("sign-out").hidden = section === "sign-in";
}

export function signOut(message) {
  state.generation += 1;
  if (state.stream) state.stream.abort();
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.agents = new Map();
  state.rows = new Map();
  state.view = null;
  state.lastSeq = 0;
  state.rendered = false;
  $("fleet-rows").textContent = "";
  setText($("tenant"), "");
  streamNote("", "");
  setText($("sign-in-error"), message || "");
  show("sign-in");
  $("token").focus();
}

export async function signIn(token) {
  state.token = token;
  state.generation += 1;
  try {
    // Reading the operator's list is the check: an unknown token gets 401, an agent's 403.
    await loadFleet();
  } catch (error) {
    if (error.status === 401 || error.status === 403) {
      signOut(error.words());
      return;
    }
    streamNote(`could not read the fleet: ${error instanceof ApiError ? error.words() : error.message}`, "warn");
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  setText($("sign-in-error"), "");
  followEvents();
  route();
}

export function route() {
  if (!state.token) return show("sign-in");
  const match = location.hash.match(/^#\/agents\/(\d+)(?:\/runs\/(\d+))?$/);
  if (match) {
    showAgent(Number(match[1]), match[2] ? Number(match[2]) : null);
  } else {
    state.view = { kind: "fleet" };
    show("fleet");
  }
}

function start() {
  buildHead();
  wireActions();
  $("sign-in-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token").value.trim();
    $("token").value = "";
    if (token) signIn(token);
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  for (const id of ["filter-name", "filter-status", "filter-liveness"]) $(id).addEventListener("input", applyFilter);
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  window.addEventListener("hashchange", route);
  setInterval(tick, TICK_MS);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) signIn(token);
  else show("sign-in");
}

start();
