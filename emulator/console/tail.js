// The audit log's live tail: a fetch() of the server-sent event stream read as it arrives (EventSource cannot
// send the Authorization header, and the token must not go in the URL). When the server ends a stream (after
// its max_seconds) or the connection drops, it reconnects from the last entry seen, so nothing is missed.

import { token, withQuery } from "./api.js";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/// One event block (`field: value` lines) as an object.
function parseEvent(block) {
  const ev = { data: "" };
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // a keep-alive comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "data") ev.data += value;
    else ev[field] = value;
  }
  return ev;
}

/// Call `onEntry(entry)` for each new audit entry and `onState(text)` as the connection changes, until the
/// returned function is called.
export function startTail(onEntry, onState) {
  const stop = new AbortController();
  let after;
  (async () => {
    while (!stop.signal.aborted) {
      try {
        const resp = await fetch(withQuery("/v1/audit/stream", { after }), {
          headers: { Authorization: `Bearer ${token.get()}`, Accept: "text/event-stream" },
          signal: stop.signal,
          cache: "no-store",
        });
        if (!resp.ok) {
          onState(`stream refused (${resp.status}); retrying`);
          await sleep(2000);
          continue;
        }
        onState("live");
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let end;
          while ((end = buf.indexOf("\n\n")) >= 0) {
            const ev = parseEvent(buf.slice(0, end));
            buf = buf.slice(end + 2);
            if (ev.event === "audit" && ev.data) {
              const entry = JSON.parse(ev.data);
              after = entry.seq;
              onEntry(entry);
            }
          }
        }
      } catch (e) {
        if (stop.signal.aborted) return;
        onState(`reconnecting (${e.message})`);
        await sleep(1000);
      }
    }
  })();
  return () => stop.abort();
}
