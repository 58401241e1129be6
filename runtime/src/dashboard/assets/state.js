// The dashboard's limits, its one state object, and time and money as it shows them.

// ---- Limits (units last) ----------------------------------------------------------------------
/** Session storage key of the operator token (this tab only). */
export const TOKEN_KEY = "vigil.operator_token";
/** Agents asked per page of GET /v1/agents (the API's largest page). */
export const AGENTS_PAGE = 1000;
/** Runs asked for at load (the API's largest page), for active runs and today's ghosts. */
export const RUNS_PAGE = 1000;
/** Events are gathered this long before the agents they name are re-read. */
export const REFETCH_BATCH_MS = 300;
/** More agents than this named in one batch: one list read beats many agent reads. */
export const REFETCH_BATCH_AGENTS_MAX = 16;
/** Agent reads in flight at once. */
export const REFETCH_CONCURRENCY_MAX = 4;
/** Agents re-read per tick because a deadline in their row passed (pulse, pause end, probe). */
export const DEADLINE_REFETCHES_PER_TICK_MAX = 8;
/** Relative times are redrawn this often. */
export const TICK_MS = 1000;
/** Reconnect delays of the event stream: first, then doubled up to the most. */
export const STREAM_RETRY_MS_MIN = 500;
export const STREAM_RETRY_MS_MAX = 10000;
/** Share of today's finished runs ending `ghost` from which an active agent shows `idling`. */
export const GHOST_IDLING_SHARE = 0.5;
/** Transcript entries per page (the API's default). */
export const LOG_PAGE = 100;
/** The timeline's window. */
export const TIMELINE_MS = 24 * 3600 * 1000;
/** Wakeup history requests per agent view (each scans at most 16 log pages on the node). */
export const WAKEUP_REQUESTS_MAX = 20;
/** Wakeup rows kept for the agent view (the newest). */
export const WAKEUP_ROWS_MAX = 200;
/** Timeline requests per agent view update (each scans at most 16 log pages on the node). */
export const TIMELINE_REQUESTS_MAX = 20;
/** Timeline entries asked per request (the API's largest page). */
export const TIMELINE_PAGE = 1000;
/** Timeline entries kept for the agent view (the newest). */
export const TIMELINE_ENTRIES_MAX = 5000;
/** Requests of the binary search for the log position 24 h ago. */
export const SEEK_REQUESTS_MAX = 40;
export const DAY_MS = 86400000;

// ---- State -------------------------------------------------------------------------------------
export const state = {
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
  seen: new Map(), // agent id -> events seen live (pauses, liveness, breaker) for the timeline
  generation: 0, // bumped at sign-out: late answers of an old session are dropped
  rendered: false,
};

export const $ = (id) => document.getElementById(id);
export const serverNow = () => Date.now() + state.skewMs;

// ---- Formatting --------------------------------------------------------------------------------
export function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d`;
}
export const ago = (ms) => (ms == null ? "—" : `${span(serverNow() - ms)} ago`);
export const within = (ms) => (ms == null ? "—" : ms <= serverNow() ? "due" : `in ${span(ms - serverNow())}`);
export const usd = (dollars) => (dollars === 0 ? "$0" : `$${dollars.toFixed(dollars < 1 ? 4 : 2)}`);
export const clock = (ms) => (ms == null ? "—" : new Date(ms).toLocaleString());

export const dayFormats = new Map();
/** Days since 1970-01-01 of the local day in `zone` at `ms`: the API's `day`. */
export function localDay(ms, zone) {
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
/** Today in each time zone, worked out once a second: a row asks several times, 1,000 rows. */
const todays = { second: null, days: new Map() };
export function todayOf(agent) {
  const zone = agent.spec.time_zone || "UTC";
  const now = serverNow();
  const second = Math.floor(now / 1000);
  if (todays.second !== second) {
    todays.second = second;
    todays.days.clear();
  }
  let day = todays.days.get(zone);
  if (day === undefined) {
    day = localDay(now, zone);
    todays.days.set(zone, day);
  }
  return day;
}
