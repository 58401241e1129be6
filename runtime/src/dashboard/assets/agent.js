// The agent view: facts, actions, the 24 h timeline, runs, a run's transcript, wakeups.

import { $, REFETCH_BATCH_MS, LOG_PAGE, TIMELINE_MS, TIMELINE_REQUESTS_MAX, TIMELINE_PAGE, TIMELINE_ENTRIES_MAX, WAKEUP_REQUESTS_MAX, WAKEUP_ROWS_MAX, SEEK_REQUESTS_MAX, state, serverNow, span, ago, clock } from "./state.js";
import { ApiError, api } from "./api.js";
import { liveness, pauseInForce, cellText, setText, putAgent } from "./fleet.js";
import { show, signOut } from "./app.js";

// ---- Agent view --------------------------------------------------------------------------------
export let agentRefreshTimer = null;
export function scheduleAgentRefresh() {
  if (!agentRefreshTimer) {
    agentRefreshTimer = setTimeout(() => {
      agentRefreshTimer = null;
      if (state.view && state.view.kind === "agent") refreshAgentView(false);
    }, REFETCH_BATCH_MS);
  }
}

export function renderAgentFacts(agent) {
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

export async function showAgent(id, run) {
  const generation = state.generation;
  const sameAgent = state.view && state.view.kind === "agent" && state.view.id === id;
  state.view = { kind: "agent", id, run, wakeups: sameAgent ? state.view.wakeups : null, timeline: sameAgent ? state.view.timeline : null };
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

export async function refreshAgentView(full) {
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
  await loadTimeline(view, full);
  if (state.view !== view) return;
  renderTimeline(agent, runs.runs, view.wakeups.rows, changes(agent, view.timeline));
}

export function renderRuns(runs) {
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

export function renderSessions(sessions) {
  const list = $("session-keys");
  list.textContent = "";
  for (const session of sessions) {
    const option = document.createElement("option");
    option.value = session.task_key;
    list.appendChild(option);
  }
}

/** The log position of the first event at or after `sinceMs`, by binary search over pages of 1. */
export async function seekSeq(sinceMs) {
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

export async function loadWakeups(view, full) {
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

/**
 * The agent's state changes (pauses, liveness, breaker, runs) of the last 24 h from the log
 * (GET /v1/agents/{id}/timeline), read on from where the previous update stopped.
 */
export async function loadTimeline(view, full) {
  if (full || !view.timeline) view.timeline = { since: serverNow() - TIMELINE_MS, after: 0, head: 0, entries: [] };
  const timeline = view.timeline;
  for (let requests = 0; requests < TIMELINE_REQUESTS_MAX; requests += 1) {
    const page = await api("GET", `/v1/agents/${view.id}/timeline?since_ms=${timeline.since}&after=${timeline.after}&limit=${TIMELINE_PAGE}`);
    timeline.entries.push(...page.entries);
    timeline.after = page.next_after;
    timeline.head = page.head_seq;
    if (page.next_after >= page.head_seq) break;
  }
  if (timeline.entries.length > TIMELINE_ENTRIES_MAX) timeline.entries.splice(0, timeline.entries.length - TIMELINE_ENTRIES_MAX);
}

/** The timeline's entries, then the changes seen live on the event stream since it was read. */
export function changes(agent, timeline) {
  const after = timeline ? timeline.after : 0;
  const all = timeline ? timeline.entries.slice() : [];
  for (const event of state.seen.get(agent.id) || []) if (event.seq > after) all.push(event);
  return all.sort((a, b) => a.seq - b.seq);
}

export function renderWakeups(rows) {
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
export const SVG = "http://www.w3.org/2000/svg";
export function svg(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text != null) node.textContent = text;
  return node;
}

export function renderTimeline(agent, runs, wakeups, history) {
  const width = 1000;
  const lanes = ["runs", "wakeups", "pauses", "liveness", "breaker"];
  const laneHeight = 22;
  const left = 80;
  const top = 18;
  const height = top + lanes.length * laneHeight + 4;
  const end = serverNow();
  const start = end - TIMELINE_MS;
  const x = (ms) => left + ((Math.min(Math.max(ms, start), end) - start) / TIMELINE_MS) * (width - left);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${agent.name}: runs, wakeups, pauses, liveness and breaker over the last 24 hours`, class: "chart" });
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
  for (const [from, to, by] of pauseSpans(agent, start, end, history)) {
    if (to < start) continue;
    const bar = svg("rect", { x: x(from), y: y("pauses"), width: Math.max(2, x(to) - x(from)), height: 14, class: "pause", "data-from": from, "data-to": to });
    bar.appendChild(svg("title", {}, `paused${by ? ` by ${by}` : ""}, ${clock(from)} to ${to >= end ? "now" : clock(to)}`));
    root.appendChild(bar);
  }
  for (const [from, to, status] of livenessSpans(agent, start, end, history)) {
    const bar = svg("rect", { x: x(from), y: y("liveness"), width: Math.max(2, x(to) - x(from)), height: 14, class: `live ${status}`, "data-from": from, "data-to": to });
    bar.appendChild(svg("title", {}, `${status}, ${clock(from)} to ${to >= end ? "now" : clock(to)}`));
    root.appendChild(bar);
  }
  for (const [from, to, breaker] of breakerSpans(agent, start, end, history)) {
    if (breaker === "closed") continue;
    const bar = svg("rect", { x: x(from), y: y("breaker"), width: Math.max(2, x(to) - x(from)), height: 14, class: `breaker ${breaker}`, "data-from": from, "data-to": to });
    bar.appendChild(svg("title", {}, `breaker ${breaker.replace("_", "-")}, ${clock(from)} to ${to >= end ? "now" : clock(to)}`));
    root.appendChild(bar);
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
  note.textContent = "Runs: those the node holds (its latest 100 finished per agent). Pauses, liveness and the breaker: their changes of the last 24 hours from the node's event log, then those seen live (pulses themselves are kept in memory; only online/offline changes are events).";
  box.appendChild(note);
}

/** [from, to, by] of each pause in the window: the logged changes folded in order. */
export function pauseSpans(agent, start, end, history) {
  const spans = [];
  let open = null;
  let changed = false;
  const close = (at) => {
    spans.push([open[0], open[1] == null ? at : Math.min(open[1], at), open[2]]);
    open = null;
  };
  for (const event of history) {
    if (event.type === "agent_paused") {
      if (open) close(event.at_ms);
      open = [event.at_ms, event.until_ms, event.by];
      changed = true;
    } else if (event.type === "agent_resumed") {
      // A resume with no pause before it in the window: paused since before the window.
      if (open) close(event.at_ms);
      else if (!changed) spans.push([start, event.at_ms, null]);
      changed = true;
    }
  }
  if (open) close(end);
  else if (!changed && pauseInForce(agent)) spans.push([start, agent.status === "paused" ? end : Math.min(agent.paused_until_ms, end), agent.paused_by]);
  return spans.filter(([a, b]) => b >= a);
}

/** [from, to, status] of liveness across the window: before the first change, what it implies. */
export function livenessSpans(agent, start, end, history) {
  const spans = [];
  let from = start;
  let status = null;
  for (const event of history) {
    if (event.type !== "agent_online" && event.type !== "agent_offline") continue;
    // Before an `agent_online`, the agent was offline or had never pulsed; before an
    // `agent_offline`, it was online.
    if (status == null) status = event.type === "agent_online" ? "unknown" : "online";
    spans.push([from, event.at_ms, status]);
    from = event.at_ms;
    status = event.type === "agent_online" ? "online" : "offline";
  }
  const now = liveness(agent);
  const since = agent.liveness && agent.liveness.since_ms;
  if (status != null && since != null && since > from) {
    spans.push([from, since, status]);
    from = since;
  }
  spans.push([from, end, now]);
  return spans.filter(([a, b]) => b > a);
}

/** [from, to, state] of the breaker across the window (`closed`, `open`, `half_open`). */
export function breakerSpans(agent, start, end, history) {
  const after = { breaker_opened: "open", breaker_half_opened: "half_open", breaker_closed: "closed", breaker_reset: "closed" };
  const before = { breaker_opened: "closed", breaker_half_opened: "open", breaker_closed: "half_open", breaker_reset: "open" };
  const spans = [];
  let from = start;
  let breaker = null;
  for (const event of history) {
    if (!(event.type in after)) continue;
    if (breaker == null) breaker = before[event.type];
    spans.push([from, event.at_ms, breaker]);
    from = event.at_ms;
    breaker = after[event.type];
  }
  spans.push([from, end, agent.breaker ? agent.breaker.state : breaker || "closed"]);
  return spans.filter(([a, b]) => b > a);
}

// ---- Transcript --------------------------------------------------------------------------------
export async function showTranscript(runId, offset) {
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

export function entryText(entry) {
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
export function actionResult(error, text) {
  const out = $("action-result");
  if (error) {
    out.dataset.tone = "error";
    setText(out, error instanceof ApiError ? error.words() : String(error.message || error));
  } else {
    out.dataset.tone = "ok";
    setText(out, text);
  }
}

export async function act(what, method, path, body) {
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

export function summary(answer) {
  if (!answer) return "done";
  if (answer.outcome) return answer.outcome + (answer.run ? ` (run ${answer.run})` : "") + (answer.refusal ? `: ${answer.refusal}` : "");
  if (answer.spec) return `status ${cellText(answer, "status")}, pause ${cellText(answer, "pause")}`;
  if (answer.reset !== undefined) return answer.reset ? `session of ${answer.task_key} forgotten` : `task ${answer.task_key} had no session`;
  if (answer.status) return `run ${answer.id} ${answer.status}`;
  return "done";
}

export function wireActions() {
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
