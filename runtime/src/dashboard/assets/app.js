// Vigil's dashboard: plain JavaScript, no build step, no dependency (docs/dashboard.md, ADR 0023).
// Everything it shows comes from this node's /v1 API with the operator token the user typed;
// the fleet list is read once, then kept live by the event stream, re-reading only the agents
// the events name. Text from the API is only ever set as textContent, never parsed as HTML.
"use strict";

// ---- Limits (units last) ----------------------------------------------------------------------
/** Session storage key of the operator token (this tab only). */
const TOKEN_KEY = "vigil.operator_token";
/** Agents asked per page of GET /v1/agents (the API's largest page). */
const AGENTS_PAGE = 1000;
/** Runs asked for at load (the API's largest page), for active runs and today's ghosts. */
const RUNS_PAGE = 1000;
/** Events are gathered this long before the agents they name are re-read. */
const REFETCH_BATCH_MS = 300;
/** More agents than this named in one batch: one list read beats many agent reads. */
const REFETCH_BATCH_AGENTS_MAX = 16;
/** Agent reads in flight at once. */
const REFETCH_CONCURRENCY_MAX = 4;
/** Agents re-read per tick because a deadline in their row passed (pulse, pause end, probe). */
const DEADLINE_REFETCHES_PER_TICK_MAX = 8;
/** Relative times are redrawn this often. */
const TICK_MS = 1000;
/** Reconnect delays of the event stream: first, then doubled up to the most. */
const STREAM_RETRY_MS_MIN = 500;
const STREAM_RETRY_MS_MAX = 10000;
/** Share of today's finished runs ending `ghost` from which an active agent shows `idling`. */
const GHOST_IDLING_SHARE = 0.5;
/** Transcript entries per page (the API's default). */
const LOG_PAGE = 100;
/** The timeline's window. */
const TIMELINE_MS = 24 * 3600 * 1000;
/** Wakeup history requests per agent view (each scans at most 16 log pages on the node). */
const WAKEUP_REQUESTS_MAX = 20;
/** Wakeup rows kept for the agent view (the newest). */
const WAKEUP_ROWS_MAX = 200;
/** Requests of the binary search for the log position 24 h ago. */
const SEEK_REQUESTS_MAX = 40;
const DAY_MS = 86400000;

// ---- State -------------------------------------------------------------------------------------
const state = {
  token: null,
  skewMs: 0, // the node's wall clock minus this browser's
  agents: new Map(), // id -> agent object as the API answers it
  rows: new Map(), // id -> <tr>
  active: new Map(), // agent id -> {id, started_at_ms}
  today: new Map(), // agent id -> Map(run id -> {day, ghost})
  lastSeq: 0,
  stream: null, // AbortController of the live stream
  touched: new Set(),
  batchTimer: null,
  deadlineSeen: new Map(), // agent id -> the deadline it was last re-read for
  sort: { key: "id", dir: 1 },
  view: null, // {kind: "fleet"} or {kind: "agent", id, run}
  seen: new Map(), // agent id -> events seen live (pauses, liveness) for the timeline
  generation: 0, // bumped at sign-out: late answers of an old session are dropped
  rendered: false,
};

const $ = (id) => document.getElementById(id);
const serverNow = () => Date.now() + state.skewMs;

// ---- API ---------------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  /** The API's own words: status, code and message. */
  words() {
    return `${this.status} ${this.code}: ${this.message}`;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${state.token}` };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, "unreachable", `the node did not answer (${error.message})`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch (_) {
    json = null;
  }
  if (!response.ok) {
    const error = json && json.error;
    throw new ApiError(
      response.status,
      error ? error.code : "http_error",
      error ? error.message : text.slice(0, 200) || response.statusText,
    );
  }
  return json;
}

// ---- Formatting --------------------------------------------------------------------------------
function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d`;
}
const ago = (ms) => (ms == null ? "—" : `${span(serverNow() - ms)} ago`);
const within = (ms) => (ms == null ? "—" : ms <= serverNow() ? "due" : `in ${span(ms - serverNow())}`);
const usd = (dollars) => (dollars === 0 ? "$0" : `$${dollars.toFixed(dollars < 1 ? 4 : 2)}`);
const clock = (ms) => (ms == null ? "—" : new Date(ms).toLocaleString());

const dayFormats = new Map();
/** Days since 1970-01-01 of the local day in `zone` at `ms`: the API's `day`. */
function localDay(ms, zone) {
  let format = dayFormats.get(zone);
  if (!format) {
    try {
      format = new Intl.DateTimeFormat("en-CA", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit" });
    } catch (_) {
      format = new Intl.DateTimeFormat("en-CA", { timeZone: "UTC", year: "numeric", month: "2-digit", day: "2-digit" });
    }
    dayFormats.set(zone, format);
  }
  const parts = {};
  for (const part of format.formatToParts(new Date(ms))) parts[part.type] = part.value;
  return Math.floor(Date.UTC(+parts.year, +parts.month - 1, +parts.day) / DAY_MS);
}
const todayOf = (agent) => localDay(serverNow(), agent.spec.time_zone || "UTC");

// ---- What a row shows, derived from the agent object -------------------------------------------
function liveness(agent) {
  const status = agent.liveness ? agent.liveness.status : "unknown";
  if (status === "online" && agent.pulse && serverNow() > agent.pulse.next_deadline_ms) return "suspected";
  return status;
}
function pauseInForce(agent) {
  if (agent.status === "paused") return true;
  return agent.paused_until_ms != null && agent.paused_until_ms > serverNow();
}
function ghosts(agent) {
  const runs = state.today.get(agent.id);
  const day = todayOf(agent);
  let finished = 0;
  let ghost = 0;
  if (runs) {
    for (const run of runs.values()) {
      if (run.day !== day) continue;
      finished += 1;
      if (run.ghost) ghost += 1;
    }
  }
  return { finished, ghost };
}
function statusOf(agent) {
  if (agent.status !== "active") return agent.status;
  if (agent.error) return "error";
  const g = ghosts(agent);
  if (g.finished > 0 && g.ghost / g.finished >= GHOST_IDLING_SHARE) return "idling";
  return "active";
}
function capUsed(agent) {
  return agent.day_count && agent.day_count.day === todayOf(agent) ? agent.day_count.started : 0;
}
function spendToday(agent) {
  const spend = agent.day_spend;
  if (!spend || spend.day !== todayOf(agent)) return 0;
  return spend.usage.cost_micro_usd / 1e6;
}

const COLUMNS = [
  { key: "name", label: "Agent", sort: (a) => a.name.toLowerCase() },
  { key: "status", label: "Status", sort: statusOf },
  { key: "liveness", label: "Liveness", sort: liveness },
  { key: "pulse", label: "Last pulse", sort: (a) => (a.pulse ? -a.pulse.heartbeat_at_ms : Infinity) },
  { key: "pause", label: "Pause", sort: (a) => (pauseInForce(a) ? (a.status === "paused" ? Infinity : a.paused_until_ms) : -1) },
  { key: "breaker", label: "Breaker", sort: (a) => a.breaker.state },
  { key: "cap", label: "Cap today", sort: capUsed },
  { key: "budget", label: "Budget today", sort: spendToday },
  { key: "timer", label: "Next timer", sort: (a) => (a.next_fire_at_ms == null ? Infinity : a.next_fire_at_ms) },
  { key: "run", label: "Active run", sort: (a) => (state.active.has(a.id) ? -state.active.get(a.id).id : 0) },
  { key: "ghosts", label: "Ghosts today", sort: (a) => { const g = ghosts(a); return g.finished ? g.ghost / g.finished : -1; } },
];

function cellText(agent, key) {
  switch (key) {
    case "status": {
      const status = statusOf(agent);
      return status === "error" ? `error (${agent.error.reason})` : status;
    }
    case "liveness": return liveness(agent);
    case "pulse": return agent.pulse ? ago(agent.pulse.heartbeat_at_ms) : "—";
    case "pause":
      if (agent.status === "paused") return `until resumed (${agent.paused_by || "operator"})`;
      if (pauseInForce(agent)) return `${agent.paused_by || "operator"}, ${span(agent.paused_until_ms - serverNow())} left`;
      return "—";
    case "breaker": {
      const b = agent.breaker;
      if (b.state === "open") return `open, probe ${within(b.until_ms)}`;
      if (b.state === "half_open") return b.probe ? `half-open, probe run ${b.probe}` : "half-open, next wakeup probes";
      return "closed";
    }
    case "cap": {
      const cap = agent.spec.limits.daily_cap;
      const used = capUsed(agent);
      return cap == null ? `${used} (no cap)` : `${used} (${Math.max(0, cap - used)} left)`;
    }
    case "budget": {
      const budget = agent.spec.limits.daily_budget_usd;
      const used = spendToday(agent);
      return budget == null ? `${usd(used)} (no budget)` : `${usd(used)} (${usd(Math.max(0, budget - used))} left)`;
    }
    case "timer": return agent.next_fire_at_ms == null ? "—" : within(agent.next_fire_at_ms);
    case "run": {
      const run = state.active.get(agent.id);
      return run ? `run ${run.id}, ${span(serverNow() - (run.started_at_ms || serverNow()))}` : "—";
    }
    case "ghosts": {
      const g = ghosts(agent);
      return g.finished ? `${g.ghost}/${g.finished} (${Math.round((100 * g.ghost) / g.finished)}%)` : "—";
    }
    default: return "";
  }
}

// ---- Fleet table -------------------------------------------------------------------------------
function buildHead() {
  const head = $("fleet-head");
  head.textContent = "";
  for (const column of COLUMNS) {
    const th = document.createElement("th");
    th.scope = "col";
    th.dataset.col = column.key;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "sort";
    button.textContent = column.label;
    button.addEventListener("click", () => sortBy(column.key));
    th.appendChild(button);
    head.appendChild(th);
  }
  markSort();
}

function markSort() {
  for (const th of $("fleet-head").children) {
    const on = th.dataset.col === state.sort.key;
    if (on) th.setAttribute("aria-sort", state.sort.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
}

function newRow(agent) {
  const tr = document.createElement("tr");
  tr.dataset.agent = agent.id;
  for (const column of COLUMNS) {
    const cell = document.createElement(column.key === "name" ? "th" : "td");
    cell.dataset.col = column.key;
    if (column.key === "name") {
      cell.scope = "row";
      const link = document.createElement("a");
      link.href = `#/agents/${agent.id}`;
      cell.appendChild(link);
    }
    tr.appendChild(cell);
  }
  fillRow(tr, agent);
  return tr;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function fillRow(tr, agent) {
  for (const cell of tr.children) {
    const key = cell.dataset.col;
    if (key === "name") {
      setText(cell.firstChild, agent.name);
      continue;
    }
    setText(cell, cellText(agent, key));
    if (key === "status" || key === "liveness" || key === "breaker") {
      const tone = key === "breaker" ? agent.breaker.state : cell.textContent.split(" ")[0];
      if (cell.dataset.tone !== tone) cell.dataset.tone = tone;
    }
  }
  tr.hidden = !matchesFilter(agent);
}

function matchesFilter(agent) {
  const name = $("filter-name").value.trim().toLowerCase();
  const status = $("filter-status").value;
  const live = $("filter-liveness").value;
  if (name && !agent.name.toLowerCase().includes(name)) return false;
  if (status && statusOf(agent) !== status) return false;
  if (live && liveness(agent) !== live) return false;
  return true;
}

function renderFleet() {
  const body = $("fleet-rows");
  const fragment = document.createDocumentFragment();
  for (const agent of sortedAgents()) {
    let tr = state.rows.get(agent.id);
    if (!tr) {
      tr = newRow(agent);
      state.rows.set(agent.id, tr);
    } else {
      fillRow(tr, agent);
    }
    fragment.appendChild(tr);
  }
  body.textContent = "";
  body.appendChild(fragment);
  renderCounts();
  if (!state.rendered) {
    state.rendered = true;
    performance.mark("vigil:fleet-rendered");
  }
}

function sortedAgents() {
  const column = COLUMNS.find((c) => c.key === state.sort.key);
  const agents = [...state.agents.values()];
  const key = column ? column.sort : (a) => a.id;
  agents.sort((a, b) => {
    const x = key(a);
    const y = key(b);
    if (x < y) return -state.sort.dir;
    if (x > y) return state.sort.dir;
    return a.id - b.id;
  });
  return agents;
}

function sortBy(key) {
  state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
  markSort();
  renderFleet();
}

function applyFilter() {
  for (const [id, tr] of state.rows) tr.hidden = !matchesFilter(state.agents.get(id));
  renderCounts();
}

function renderCounts() {
  let online = 0, paused = 0, open = 0, runs = 0, spend = 0, shown = 0;
  for (const agent of state.agents.values()) {
    if (liveness(agent) === "online") online += 1;
    if (pauseInForce(agent)) paused += 1;
    if (agent.breaker.state === "open") open += 1;
    runs += capUsed(agent);
    spend += spendToday(agent);
    const tr = state.rows.get(agent.id);
    if (tr && !tr.hidden) shown += 1;
  }
  const counts = { agents: state.agents.size, online, paused, breaker_open: open, runs_today: runs, spend_today: usd(spend) };
  for (const dd of document.querySelectorAll("[data-count]")) setText(dd, String(counts[dd.dataset.count]));
  setText($("shown"), `${shown} of ${state.agents.size} shown`);
}

/** One agent changed: update its row in place (or add it), the counts, and an open agent view. */
function putAgent(agent) {
  const known = state.agents.has(agent.id);
  state.agents.set(agent.id, agent);
  if (!known) {
    renderFleet();
  } else {
    const tr = state.rows.get(agent.id);
    if (tr) fillRow(tr, agent);
    renderCounts();
  }
  if (state.view && state.view.kind === "agent" && state.view.id === agent.id) renderAgentFacts(agent);
}

function dropAgent(id) {
  state.agents.delete(id);
  const tr = state.rows.get(id);
  if (tr) tr.remove();
  state.rows.delete(id);
  renderCounts();
}

// ---- Loading and the live stream ---------------------------------------------------------------
async function loadFleet() {
  const generation = state.generation;
  // The log head first: events after it are replayed by the stream, so nothing between the
  // reads below and the stream's start is missed (a replayed event only re-reads an agent).
  const health = await (await fetch("/v1/health", { cache: "no-store" })).json().catch(() => ({}));
  const head = health.head_seq || 0;
  const readAgents = async () => {
    const found = new Map();
    let after = 0;
    let now = null;
    for (;;) {
      const page = await api("GET", `/v1/agents?after=${after}&limit=${AGENTS_PAGE}`);
      if (now == null) now = page.now_ms;
      for (const agent of page.agents) found.set(agent.id, agent);
      if (page.next_after == null) return [found, now];
      after = page.next_after;
    }
  };
  const [[agents, nowMs], running, recent] = await Promise.all([
    readAgents(),
    api("GET", `/v1/runs?status=running&limit=${RUNS_PAGE}`),
    api("GET", `/v1/runs?limit=${RUNS_PAGE}`),
  ]);
  if (generation !== state.generation) return;
  state.skewMs = nowMs - Date.now();
  state.agents = agents;
  state.active = new Map();
  for (const run of running.runs) state.active.set(run.agent, { id: run.id, started_at_ms: run.started_at_ms });
  state.today = new Map();
  for (const run of recent.runs) {
    const agent = agents.get(run.agent);
    if (agent && run.finished_at_ms != null && run.started_at_ms != null) {
      noteFinished(run.agent, run.id, localDay(run.finished_at_ms, agent.spec.time_zone), run.stop_reason === "ghost");
    }
  }
  const tenant = agents.size ? agents.values().next().value.tenant : "";
  setText($("tenant"), tenant ? `tenant ${tenant}` : "");
  state.lastSeq = Math.max(state.lastSeq, head);
  renderFleet();
}

function noteFinished(agentId, runId, day, ghost) {
  let runs = state.today.get(agentId);
  if (!runs) {
    runs = new Map();
    state.today.set(agentId, runs);
  }
  runs.set(runId, { day, ghost });
}

function streamNote(text, tone) {
  const note = $("stream");
  setText(note, text);
  note.dataset.tone = tone;
}

async function followEvents() {
  const generation = state.generation;
  let delay = STREAM_RETRY_MS_MIN;
  while (generation === state.generation) {
    const controller = new AbortController();
    state.stream = controller;
    try {
      const response = await fetch(`/v1/events?after=${state.lastSeq}`, {
        headers: {
          Authorization: `Bearer ${state.token}`,
          Accept: "text/event-stream",
          "Last-Event-ID": String(state.lastSeq),
        },
        cache: "no-store",
        signal: controller.signal,
      });
      if (response.status === 410) {
        // The resume point was compacted away: what happened since cannot be replayed.
        streamNote("resuming from the present: re-reading the fleet", "warn");
        await loadFleet();
        continue;
      }
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        throw new ApiError(response.status, body ? body.error.code : "http_error", body ? body.error.message : response.statusText);
      }
      streamNote("live", "ok");
      delay = STREAM_RETRY_MS_MIN;
      await readFrames(response.body, generation);
      streamNote("stream ended; resuming", "warn");
    } catch (error) {
      if (generation !== state.generation) return;
      if (error instanceof ApiError && error.status === 401) {
        signOut(error.words());
        return;
      }
      streamNote(`stream dropped (${error instanceof ApiError ? error.words() : error.message}); resuming from event ${state.lastSeq}`, "warn");
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(STREAM_RETRY_MS_MAX, delay * 2);
  }
}

/** Reads Server-Sent Events frames (docs/api.md, "SSE framing") until the stream ends. */
async function readFrames(body, generation) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done || generation !== state.generation) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let type = "message";
      let data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") type = text;
        else if (field === "data") data += (data ? "\n" : "") + text;
      }
      if (type === "error") throw new Error(data || "the node reported a stream error");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

function onEvent(event) {
  state.lastSeq = Math.max(state.lastSeq, event.seq);
  const id = event.agent;
  if (id == null) return;
  switch (event.type) {
    case "run_started":
      state.active.set(id, { id: event.run, started_at_ms: event.at_ms });
      break;
    case "run_finished": {
      const active = state.active.get(id);
      if (active && active.id === event.run) state.active.delete(id);
      const agent = state.agents.get(id);
      if (agent) noteFinished(id, event.run, localDay(event.at_ms, agent.spec.time_zone), event.stop_reason === "ghost");
      break;
    }
    case "agent_deleted":
      dropAgent(id);
      return;
    case "agent_paused":
    case "agent_resumed":
    case "agent_online":
    case "agent_offline":
    case "agent_terminated":
      remember(id, event);
      break;
    default:
      break;
  }
  touch(id);
  if (state.view && state.view.kind === "agent" && state.view.id === id) scheduleAgentRefresh();
}

function remember(id, event) {
  let list = state.seen.get(id);
  if (!list) {
    list = [];
    state.seen.set(id, list);
  }
  list.push({ type: event.type, at_ms: event.at_ms, until_ms: event.until_ms, by: event.by });
}

/** Re-read `id` soon, together with the other agents events name meanwhile. */
function touch(id) {
  state.touched.add(id);
  if (!state.batchTimer) state.batchTimer = setTimeout(refetchTouched, REFETCH_BATCH_MS);
}

async function refetchTouched() {
  state.batchTimer = null;
  const ids = [...state.touched];
  state.touched.clear();
  const generation = state.generation;
  if (ids.length > REFETCH_BATCH_AGENTS_MAX) {
    try {
      await relist(generation);
    } catch (error) {
      streamNote(`could not re-read the fleet: ${error.message}`, "warn");
    }
    return;
  }
  const queue = ids.slice();
  const worker = async () => {
    while (queue.length) {
      const id = queue.shift();
      try {
        const agent = await api("GET", `/v1/agents/${id}`);
        if (generation === state.generation) putAgent(agent);
      } catch (error) {
        if (error.status === 404) dropAgent(id);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(REFETCH_CONCURRENCY_MAX, queue.length) }, worker));
}

/** Many agents changed at once: read the list (pages of 1,000) and update every row in place. */
async function relist(generation) {
  let after = 0;
  for (;;) {
    const page = await api("GET", `/v1/agents?after=${after}&limit=${AGENTS_PAGE}`);
    if (generation !== state.generation) return;
    for (const agent of page.agents) putAgent(agent);
    if (page.next_after == null) return;
    after = page.next_after;
  }
}

/** Every second: move relative times, and re-read agents whose shown deadline just passed. */
function tick() {
  if (!state.token || !state.agents.size) return;
  const now = serverNow();
  let asked = 0;
  for (const [id, agent] of state.agents) {
    const tr = state.rows.get(id);
    if (tr) fillRow(tr, agent);
    const deadline = passedDeadline(agent, now);
    if (deadline != null && state.deadlineSeen.get(id) !== deadline && asked < DEADLINE_REFETCHES_PER_TICK_MAX) {
      state.deadlineSeen.set(id, deadline);
      touch(id);
      asked += 1;
    }
  }
  renderCounts();
  if (state.view && state.view.kind === "agent") {
    const agent = state.agents.get(state.view.id);
    if (agent) renderAgentFacts(agent);
  }
}

/** A deadline in the agent's row the node may have acted on without an event (a pulse due). */
function passedDeadline(agent, now) {
  const candidates = [];
  if (agent.pulse && liveness(agent) === "suspected") candidates.push(agent.pulse.next_deadline_ms);
  if (agent.paused_until_ms != null && agent.status === "active") candidates.push(agent.paused_until_ms);
  if (agent.breaker.state === "open") candidates.push(agent.breaker.until_ms);
  const passed = candidates.filter((ms) => ms <= now);
  return passed.length ? Math.max(...passed) : null;
}

// ---- Agent view --------------------------------------------------------------------------------
let agentRefreshTimer = null;
function scheduleAgentRefresh() {
  if (!agentRefreshTimer) {
    agentRefreshTimer = setTimeout(() => {
      agentRefreshTimer = null;
      if (state.view && state.view.kind === "agent") refreshAgentView(false);
    }, REFETCH_BATCH_MS);
  }
}

function renderAgentFacts(agent) {
  setText($("agent-title"), `${agent.name} (agent ${agent.id})`);
  const facts = [
    ["Status", cellText(agent, "status")],
    ["Liveness", `${liveness(agent)}${agent.liveness && agent.liveness.since_ms ? `, since ${clock(agent.liveness.since_ms)}` : ""}`],
    ["Last pulse", cellText(agent, "pulse")],
    ["Pause", cellText(agent, "pause")],
    ["Breaker", cellText(agent, "breaker")],
    ["Cap today", cellText(agent, "cap")],
    ["Budget today", cellText(agent, "budget")],
    ["Next timer", cellText(agent, "timer")],
    ["Active run", cellText(agent, "run")],
    ["Ghosts today", cellText(agent, "ghosts")],
    ["Time zone", agent.spec.time_zone],
    ["Runs started", String(agent.runs_started)],
  ];
  const dl = $("agent-facts");
  if (dl.children.length !== facts.length) {
    dl.textContent = "";
    for (const [name] of facts) {
      const div = document.createElement("div");
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.dataset.fact = name.toLowerCase().replace(/ /g, "_");
      div.append(dt, dd);
      dl.appendChild(div);
    }
  }
  facts.forEach(([, value], i) => setText(dl.children[i].lastChild, value));
  setText($("spec"), JSON.stringify(agent.spec, null, 2));
}

async function showAgent(id, run) {
  const generation = state.generation;
  const sameAgent = state.view && state.view.kind === "agent" && state.view.id === id;
  state.view = { kind: "agent", id, run, wakeups: sameAgent ? state.view.wakeups : null };
  show("agent");
  if (!sameAgent) {
    setText($("action-result"), "");
    $("runs").textContent = "";
    $("wakeups").textContent = "";
    $("timeline").textContent = "";
  }
  try {
    const agent = await api("GET", `/v1/agents/${id}`);
    if (generation !== state.generation) return;
    putAgent(agent);
    renderAgentFacts(agent);
    await refreshAgentView(true);
  } catch (error) {
    setText($("agent-title"), `Agent ${id}`);
    actionResult(error);
    return;
  }
  if (run != null) await showTranscript(run, 0);
  else $("transcript").hidden = true;
}

async function refreshAgentView(full) {
  const view = state.view;
  const id = view.id;
  const [agent, runs, sessions] = await Promise.all([
    api("GET", `/v1/agents/${id}`),
    api("GET", `/v1/runs?agent=${id}&limit=100`),
    api("GET", `/v1/agents/${id}/sessions`).catch(() => ({ sessions: [] })),
  ]);
  if (state.view !== view) return;
  putAgent(agent);
  renderRuns(runs.runs);
  renderSessions(sessions.sessions || []);
  await loadWakeups(view, full);
  if (state.view !== view) return;
  renderTimeline(agent, runs.runs, view.wakeups.rows);
}

function renderRuns(runs) {
  const body = $("runs");
  body.textContent = "";
  for (const run of runs) {
    const tr = document.createElement("tr");
    tr.dataset.run = run.id;
    tr.dataset.status = run.status;
    const link = document.createElement("a");
    link.href = `#/agents/${run.agent}/runs/${run.id}`;
    link.textContent = `run ${run.id}`;
    link.title = "open its transcript";
    const end = run.finished_at_ms || (run.started_at_ms ? serverNow() : null);
    const cells = [
      link,
      run.status,
      run.stop_reason || "—",
      run.source,
      clock(run.queued_at_ms),
      run.started_at_ms ? span(end - run.started_at_ms) + (run.finished_at_ms ? "" : " so far") : "—",
      run.detail || "",
    ];
    for (const value of cells) {
      const td = document.createElement("td");
      if (typeof value === "string") td.textContent = value;
      else td.appendChild(value);
      tr.appendChild(td);
    }
    const td = document.createElement("td");
    if (run.status === "queued" || run.status === "running") {
      const cancel = document.createElement("button");
      cancel.type = "button";
      cancel.textContent = "Cancel";
      cancel.dataset.cancel = run.id;
      cancel.addEventListener("click", () => act(`Cancel run ${run.id}`, "POST", `/v1/runs/${run.id}/cancel`));
      td.appendChild(cancel);
    }
    tr.appendChild(td);
    body.appendChild(tr);
  }
  if (!runs.length) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = 8;
    td.textContent = "No run held by the node yet.";
    tr.appendChild(td);
    body.appendChild(tr);
  }
}

function renderSessions(sessions) {
  const list = $("session-keys");
  list.textContent = "";
  for (const session of sessions) {
    const option = document.createElement("option");
    option.value = session.task_key;
    list.appendChild(option);
  }
}

/** The log position of the first event at or after `sinceMs`, by binary search over pages of 1. */
async function seekSeq(sinceMs) {
  const health = await (await fetch("/v1/health", { cache: "no-store" })).json();
  let lo = 0;
  let hi = health.head_seq || 0;
  for (let i = 0; i < SEEK_REQUESTS_MAX && lo < hi; i += 1) {
    const mid = Math.floor((lo + hi) / 2);
    const page = await api("GET", `/v1/events?after=${mid}&limit=1`);
    const first = page.events[0];
    if (!first || first.at_ms >= sinceMs) hi = mid;
    else lo = first.seq;
  }
  return { from: lo, head: health.head_seq || 0 };
}

async function loadWakeups(view, full) {
  if (full || !view.wakeups) {
    const since = serverNow() - TIMELINE_MS;
    let from = 0;
    try {
      from = (await seekSeq(since)).from;
    } catch (error) {
      if (error.status === 410) from = 0;
      else throw error;
    }
    view.wakeups = { after: from, rows: [], from };
  }
  const wakeups = view.wakeups;
  let requests = 0;
  let head = 0;
  for (; requests < WAKEUP_REQUESTS_MAX; requests += 1) {
    let page;
    try {
      page = await api("GET", `/v1/wakeups?agent=${view.id}&after=${wakeups.after}&limit=1000`);
    } catch (error) {
      if (error.status === 410) {
        wakeups.after = 0;
        continue;
      }
      throw error;
    }
    // A wakeup's status changes as its run goes on: the newest answer for it wins.
    for (const row of page.wakeups) {
      const at = wakeups.rows.findIndex((r) => r.wakeup === row.wakeup);
      if (at >= 0) wakeups.rows[at] = row;
      else wakeups.rows.push(row);
    }
    head = page.head_seq;
    wakeups.after = page.next_after;
    if (page.next_after >= page.head_seq) break;
  }
  // Runs still going are asked again next time, from the first of them.
  const open = wakeups.rows.find((r) => r.status === "queued" || r.status === "coalesced" || r.status === "started");
  if (open) wakeups.after = Math.min(wakeups.after, open.seq - 1);
  if (wakeups.rows.length > WAKEUP_ROWS_MAX) wakeups.rows.splice(0, wakeups.rows.length - WAKEUP_ROWS_MAX);
  const partial = wakeups.after < head;
  setText(
    $("wakeups-note"),
    `Wakeups of the last 24 hours, newest first (log positions after ${wakeups.from})` +
      (partial ? `; read up to position ${wakeups.after} of ${head}, the rest on the next update.` : "."),
  );
  renderWakeups(wakeups.rows);
}

function renderWakeups(rows) {
  const body = $("wakeups");
  body.textContent = "";
  for (const row of rows.slice().reverse()) {
    const tr = document.createElement("tr");
    tr.dataset.wakeup = row.wakeup;
    tr.dataset.status = row.status;
    const end = row.status === "refused" ? row.refusal : [row.run_status, row.stop_reason, row.error_class].filter(Boolean).join(", ");
    const cells = [String(row.wakeup), clock(row.at_ms), row.source, row.requested_by || "—", row.reason || "", row.status, end || (row.run ? `run ${row.run}` : "—")];
    for (const value of cells) {
      const td = document.createElement("td");
      td.textContent = value;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

// ---- Timeline (inline SVG) ---------------------------------------------------------------------
const SVG = "http://www.w3.org/2000/svg";
function svg(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text != null) node.textContent = text;
  return node;
}

function renderTimeline(agent, runs, wakeups) {
  const width = 1000;
  const lanes = ["runs", "wakeups", "pauses", "liveness"];
  const laneHeight = 22;
  const left = 80;
  const top = 18;
  const height = top + lanes.length * laneHeight + 4;
  const end = serverNow();
  const start = end - TIMELINE_MS;
  const x = (ms) => left + ((Math.min(Math.max(ms, start), end) - start) / TIMELINE_MS) * (width - left);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${agent.name}: runs, wakeups, pauses and liveness over the last 24 hours`, class: "chart" });
  for (let h = 0; h <= 24; h += 6) {
    const at = start + h * 3600000;
    root.appendChild(svg("line", { x1: x(at), x2: x(at), y1: top - 4, y2: height, class: "grid" }));
    root.appendChild(svg("text", { x: x(at), y: 10, class: "tick", "text-anchor": h === 0 ? "start" : h === 24 ? "end" : "middle" }, h === 24 ? "now" : `-${24 - h} h`));
  }
  lanes.forEach((lane, i) => root.appendChild(svg("text", { x: 0, y: top + i * laneHeight + 14, class: "lane" }, lane)));
  const y = (lane) => top + lanes.indexOf(lane) * laneHeight + 3;
  for (const run of runs) {
    if (run.started_at_ms == null) continue;
    const finished = run.finished_at_ms || end;
    if (finished < start) continue;
    const bar = svg("rect", { x: x(run.started_at_ms), y: y("runs"), width: Math.max(2, x(finished) - x(run.started_at_ms)), height: 14, class: `run ${run.status} ${run.stop_reason || ""}` });
    bar.appendChild(svg("title", {}, `run ${run.id}: ${run.status}${run.stop_reason ? ` (${run.stop_reason})` : ""}`));
    root.appendChild(bar);
  }
  for (const row of wakeups) {
    if (row.at_ms < start) continue;
    const mark = svg("rect", { x: x(row.at_ms) - 1, y: y("wakeups"), width: 2, height: 14, class: `wakeup ${row.status}` });
    mark.appendChild(svg("title", {}, `wakeup ${row.wakeup} (${row.source}): ${row.status}${row.refusal ? `, ${row.refusal}` : ""}`));
    root.appendChild(mark);
  }
  for (const [from, to, by] of pauseSpans(agent, start, end)) {
    const bar = svg("rect", { x: x(from), y: y("pauses"), width: Math.max(2, x(to) - x(from)), height: 14, class: "pause" });
    bar.appendChild(svg("title", {}, `paused by ${by || "operator"}`));
    root.appendChild(bar);
  }
  for (const [from, to, status] of livenessSpans(agent, start, end)) {
    root.appendChild(svg("rect", { x: x(from), y: y("liveness"), width: Math.max(2, x(to) - x(from)), height: 14, class: `live ${status}` }));
  }
  if (agent.pulse && agent.pulse.heartbeat_at_ms >= start) {
    const pulse = svg("circle", { cx: x(agent.pulse.heartbeat_at_ms), cy: y("liveness") + 7, r: 4, class: "pulse" });
    pulse.appendChild(svg("title", {}, `last pulse ${ago(agent.pulse.heartbeat_at_ms)}`));
    root.appendChild(pulse);
  }
  const box = $("timeline");
  box.textContent = "";
  box.appendChild(root);
  const note = document.createElement("p");
  note.className = "hint";
  note.textContent = "Runs: those the node holds (its latest 100 finished per agent). Pauses and liveness: the one in force now, and the changes seen live since this page loaded (pulses are kept in memory, only online/offline changes are events).";
  box.appendChild(note);
}

function pauseSpans(agent, start, end) {
  const spans = [];
  let open = null;
  for (const event of state.seen.get(agent.id) || []) {
    if (event.type === "agent_paused") open = [event.at_ms, event.until_ms, event.by];
    if (event.type === "agent_resumed" && open) {
      spans.push([open[0], event.at_ms, open[2]]);
      open = null;
    }
  }
  if (open) spans.push([open[0], open[1] == null ? end : Math.min(open[1], end), open[2]]);
  else if (pauseInForce(agent)) spans.push([start, agent.status === "paused" ? end : Math.min(agent.paused_until_ms, end), agent.paused_by]);
  return spans;
}

function livenessSpans(agent, start, end) {
  const spans = [];
  let from = start;
  let status = "unknown";
  for (const event of state.seen.get(agent.id) || []) {
    if (event.type !== "agent_online" && event.type !== "agent_offline") continue;
    spans.push([from, event.at_ms, status]);
    from = event.at_ms;
    status = event.type === "agent_online" ? "online" : "offline";
  }
  const now = liveness(agent);
  const since = agent.liveness && agent.liveness.since_ms;
  if (since != null && since > from) {
    spans.push([from, since, status]);
    from = since;
  }
  spans.push([from, end, now]);
  return spans.filter(([a, b]) => b > a);
}

// ---- Transcript --------------------------------------------------------------------------------
async function showTranscript(runId, offset) {
  const section = $("transcript");
  section.hidden = false;
  setText($("transcript-title"), `Transcript of run ${runId}`);
  let page;
  try {
    page = await api("GET", `/v1/runs/${runId}/log?offset=${offset}&limit=${LOG_PAGE}`);
  } catch (error) {
    setText($("log-where"), error.words());
    $("log").textContent = "";
    return;
  }
  const list = $("log");
  list.textContent = "";
  list.start = offset + 1;
  for (const entry of page.entries) {
    const li = document.createElement("li");
    li.dataset.kind = entry.kind;
    const head = document.createElement("span");
    head.className = "entry-head";
    head.textContent = `${new Date(entry.at_ms).toLocaleTimeString()} ${entry.kind}`;
    const text = document.createElement("pre");
    text.className = "entry-body";
    text.textContent = entryText(entry);
    li.append(head, text);
    list.appendChild(li);
  }
  if (!page.entries.length) {
    const li = document.createElement("li");
    li.textContent = page.complete ? "This run has no transcript entries." : "No entries yet.";
    list.appendChild(li);
  }
  const prev = $("log-prev");
  const next = $("log-next");
  prev.disabled = offset === 0;
  next.disabled = page.next_offset === offset + page.entries.length && page.complete;
  prev.onclick = () => showTranscript(runId, Math.max(0, offset - LOG_PAGE));
  next.onclick = () => showTranscript(runId, page.next_offset);
  setText($("log-where"), `entries ${offset + 1}–${offset + page.entries.length}${page.complete ? " (complete)" : ""}`);
}

function entryText(entry) {
  const { run, seq, at_ms, kind, ...rest } = entry;
  switch (kind) {
    case "stop": return `${rest.stop_reason}: ${rest.detail || ""}`;
    case "note": return rest.text;
    case "child_output": return `${rest.stream}: ${rest.text}`;
    case "model_response": return rest.text || JSON.stringify(rest);
    default: return JSON.stringify(rest, null, 1);
  }
}

// ---- Actions -----------------------------------------------------------------------------------
function actionResult(error, text) {
  const out = $("action-result");
  if (error) {
    out.dataset.tone = "error";
    setText(out, error instanceof ApiError ? error.words() : String(error.message || error));
  } else {
    out.dataset.tone = "ok";
    setText(out, text);
  }
}

async function act(what, method, path, body) {
  try {
    const answer = await api(method, path, body);
    actionResult(null, `${what}: ${summary(answer)}`);
    if (answer && answer.id === state.view.id && answer.spec) putAgent(answer);
    scheduleAgentRefresh();
  } catch (error) {
    if (error.status === 401) signOut(error.words());
    else actionResult(error);
  }
}

function summary(answer) {
  if (!answer) return "done";
  if (answer.outcome) return answer.outcome + (answer.run ? ` (run ${answer.run})` : "") + (answer.refusal ? `: ${answer.refusal}` : "");
  if (answer.spec) return `status ${cellText(answer, "status")}, pause ${cellText(answer, "pause")}`;
  if (answer.reset !== undefined) return answer.reset ? `session of ${answer.task_key} forgotten` : `task ${answer.task_key} had no session`;
  if (answer.status) return `run ${answer.id} ${answer.status}`;
  return "done";
}

function wireActions() {
  $("wake-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("wake-payload").value.trim();
    let payload = null;
    if (text) {
      try {
        payload = JSON.parse(text);
      } catch (error) {
        actionResult(new Error(`the payload is not JSON: ${error.message}`));
        return;
      }
    }
    act("Wake", "POST", `/v1/agents/${state.view.id}/wakeup`, { source: "on_demand", reason: $("wake-reason").value, payload });
  });
  $("pause-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const minutes = $("pause-minutes").value.trim();
    // Anything but a whole number goes as typed, so that the API refuses it in its own words.
    const value = /^-?\d+$/.test(minutes) ? Number(minutes) : minutes;
    act("Pause", "POST", `/v1/agents/${state.view.id}/pause`, minutes ? { minutes: value } : {});
  });
  $("resume").addEventListener("click", () => act("Resume", "POST", `/v1/agents/${state.view.id}/resume`));
  $("session-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("session-key").value;
    act("Reset session", "POST", `/v1/agents/${state.view.id}/sessions/${encodeURIComponent(key)}/reset`);
  });
}

// ---- Sign-in, routing --------------------------------------------------------------------------
function show(section) {
  for (const id of ["sign-in", "fleet", "agent"]) $(id).hidden = id !== section;
  $("sign-out").hidden = section === "sign-in";
}

function signOut(message) {
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

async function signIn(token) {
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

function route() {
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
