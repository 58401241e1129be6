// Calls to this node's /v1 API with the operator token; errors keep the API's own words.

import { state } from "./state.js";

// ---- API ---------------------------------------------------------------------------------------
export class ApiError extends Error {
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

export async function api(method, path, body) {
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
