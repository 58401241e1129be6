// The fleet view: what each row shows (derived from the agent object), the table, the counts.

import { $, GHOST_IDLING_SHARE, state, serverNow, span, ago, within, usd, todayOf } from "./state.js";
import { renderAgentFacts } from "./agent.js";

// ---- What a row shows, derived from the agent object -------------------------------------------
export function liveness(agent) {
  const status = agent.liveness ? agent.liveness.status : "unknown";
  if (status === "online" && agent.pulse && serverNow() > agent.pulse.next_deadline_ms) return "suspected";
  return status;
}
export function pauseInForce(agent) {
  if (agent.status === "paused") return true;
  return agent.paused_until_ms != null && agent.paused_until_ms > serverNow();
}
export function ghosts(agent) {
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
export function statusOf(agent) {
  if (agent.status !== "active") return agent.status;
  if (agent.error) return "error";
  const g = ghosts(agent);
  if (g.finished > 0 && g.ghost / g.finished >= GHOST_IDLING_SHARE) return "idling";
  return "active";
}
export function capUsed(agent) {
  return agent.day_count && agent.day_count.day === todayOf(agent) ? agent.day_count.started : 0;
}
export function spendToday(agent) {
  const spend = agent.day_spend;
  if (!spend || spend.day !== todayOf(agent)) return 0;
  return spend.usage.cost_micro_usd / 1e6;
}

export const COLUMNS = [
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

export function cellText(agent, key) {
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
export function buildHead() {
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

export function markSort() {
  for (const th of $("fleet-head").children) {
    const on = th.dataset.col === state.sort.key;
    if (on) th.setAttribute("aria-sort", state.sort.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
}

export function newRow(agent) {
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

export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

export function fillRow(tr, agent) {
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

export function matchesFilter(agent) {
  const name = $("filter-name").value.trim().toLowerCase();
  const status = $("filter-status").value;
  const live = $("filter-liveness").value;
  if (name && !agent.name.toLowerCase().includes(name)) return false;
  if (status && statusOf(agent) !== status) return false;
  if (live && liveness(agent) !== live) return false;
  return true;
}

export function renderFleet() {
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

export function sortedAgents() {
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

export function sortBy(key) {
  state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
  markSort();
  renderFleet();
}

export function applyFilter() {
  for (const [id, tr] of state.rows) tr.hidden = !matchesFilter(state.agents.get(id));
  renderCounts();
}

export function renderCounts() {
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
export function putAgent(agent) {
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

export function dropAgent(id) {
  state.agents.delete(id);
  const tr = state.rows.get(id);
  if (tr) tr.remove();
  state.rows.delete(id);
  renderCounts();
}
