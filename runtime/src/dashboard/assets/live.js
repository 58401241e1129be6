// Loading the fleet once, then following the event stream: one agent re-read per event.

import { $, AGENTS_PAGE, RUNS_PAGE, REFETCH_BATCH_MS, REFETCH_BATCH_AGENTS_MAX, REFETCH_CONCURRENCY_MAX, DEADLINE_REFETCHES_PER_TICK_MAX, STREAM_RETRY_MS_MIN, STREAM_RETRY_MS_MAX, state, serverNow, localDay } from "./state.js";
import { ApiError, api } from "./api.js";
import { liveness, setText, fillRow, renderFleet, renderCounts, putAgent, dropAgent } from "./fleet.js";
import { scheduleAgentRefresh, renderAgentFacts } from "./agent.js";
import { signOut } from "./app.js";

// ---- Loading and the live stream ---------------------------------------------------------------
export async function loadFleet() {
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
  if (!state.rendered) performance.mark("vigil:fleet-read");
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

export function noteFinished(agentId, runId, day, ghost) {
  let runs = state.today.get(agentId);
  if (!runs) {
    runs = new Map();
    state.today.set(agentId, runs);
  }
  runs.set(runId, { day, ghost });
}

export function streamNote(text, tone) {
  const note = $("stream");
  setText(note, text);
  note.dataset.tone = tone;
}

export async function followEvents() {
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
export async function readFrames(body, generation) {
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

export function onEvent(event) {
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
    case "breaker_opened":
    case "breaker_half_opened":
    case "breaker_closed":
    case "breaker_reset":
      remember(id, event);
      break;
    default:
      break;
  }
  touch(id);
  if (state.view && state.view.kind === "agent" && state.view.id === id) scheduleAgentRefresh();
}

export function remember(id, event) {
  let list = state.seen.get(id);
  if (!list) {
    list = [];
    state.seen.set(id, list);
  }
  list.push({ seq: event.seq, type: event.type, at_ms: event.at_ms, until_ms: event.until_ms, by: event.by });
}

/** Re-read `id` soon, together with the other agents events name meanwhile. */
export function touch(id) {
  state.touched.add(id);
  if (!state.batchTimer) state.batchTimer = setTimeout(refetchTouched, REFETCH_BATCH_MS);
}

export async function refetchTouched() {
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
export async function relist(generation) {
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
export function tick() {
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
export function passedDeadline(agent, now) {
  const candidates = [];
  if (agent.pulse && liveness(agent) === "suspected") candidates.push(agent.pulse.next_deadline_ms);
  if (agent.paused_until_ms != null && agent.status === "active") candidates.push(agent.paused_until_ms);
  if (agent.breaker.state === "open") candidates.push(agent.breaker.until_ms);
  const passed = candidates.filter((ms) => ms <= now);
  return passed.length ? Math.max(...passed) : null;
}
