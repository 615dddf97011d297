-- wrk script for bench/moto_compare.py: one operation, every request unique. The driver sets
--   BENCH_METHOD, BENCH_PATH, BENCH_HEADERS (lines "Name: value"), BENCH_BODY (may be empty)
-- and the body's placeholders are filled per request: {n} a number no other request of the run has, {zone}
-- one of three zones in turn, {ip} an address in 100.64.0.0/10 derived from {n} (for route destinations).
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

local method = os.getenv("BENCH_METHOD")
local path = os.getenv("BENCH_PATH")
local template = os.getenv("BENCH_BODY") or ""
local headers = {}
for line in (os.getenv("BENCH_HEADERS") or ""):gmatch("[^\n]+") do
  local name, value = line:match("^([^:]+):%s*(.*)$")
  headers[name] = value
end
local zones = { "local-1a", "local-1b", "local-1c" }
local count = 0

function request()
  count = count + 1
  if template == "" then
    return wrk.format(method, path, headers, nil)
  end
  -- 2^20 numbers per wrk thread: distinct across threads, and {ip} stays inside the /10.
  local n = tid * 1048576 + count
  local ip = string.format("100.%d.%d.%d", 64 + math.floor(n / 65536) % 64, math.floor(n / 256) % 256, n % 256)
  local body = template:gsub("{n}", tostring(n)):gsub("{zone}", zones[n % 3 + 1]):gsub("{ip}", ip)
  return wrk.format(method, path, headers, body)
end
