// The API, called with the token signed in with. The token lives in sessionStorage only: it is gone when the tab
// closes, is never put in a URL, and is sent only as `Authorization: Bearer` to this origin.

const KEY = "fakecloud-token";

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

/// An API error, with the message the API gave (the same the CLI shows).
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(body) {
  const h = { Authorization: `Bearer ${token.get()}` };
  if (body !== undefined) h["Content-Type"] = "application/json";
  return h;
}

/// Call `method path` with an optional JSON body; the parsed answer, or throws ApiError.
export async function call(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: headers(body),
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const text = await resp.text();
  const json = text ? JSON.parse(text) : null;
  if (!resp.ok) {
    const e = json?.error ?? {};
    throw new ApiError(resp.status, e.code ?? "Error", `${e.code ?? resp.status}: ${e.message ?? resp.statusText}`);
  }
  return json;
}

/// `path` with the query parameters that are set.
export function withQuery(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/// Which role the token has: "admin", "user", or throws (401: not a token of this emulator).
export async function whoAmI() {
  await call("GET", "/v1/region");
  try {
    await call("GET", "/v1/faults");
    return "admin";
  } catch (e) {
    if (e.status === 403) return "user";
    throw e;
  }
}
