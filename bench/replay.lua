-- wrk script for bench/moto_compare.py: replays requests the driver built, for calls wrk cannot make itself (the
-- AWS face's, signed with SigV4, whose HMACs are not to be had in wrk's Lua; or a few calls made in turn). The
-- driver sets
--   BENCH_REQUESTS  a file of raw HTTP/1.1 requests, each after a line giving its length in bytes;
--   BENCH_WRAP      "1": every thread sends the file's requests in turn, again and again (calls that may be
--                   repeated). Otherwise each request is sent once: thread k (from 0) of n sends the k-th of n
--                   equal slices of the file, in order, and a thread at the end of its slice stops, and done()
--                   says "replay: ran out" (the driver then fails the run: it measured less than its duration);
--   BENCH_THREADS   wrk's -t.
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

local function slice(path, k, n)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  local all, pos = {}, 1
  while pos <= #data do
    local eol = data:find("\n", pos, true)
    local length = tonumber(data:sub(pos, eol - 1))
    all[#all + 1] = data:sub(eol + 1, eol + length)
    pos = eol + 1 + length
  end
  local mine = {}
  for i = math.floor(#all * k / n) + 1, math.floor(#all * (k + 1) / n) do
    mine[#mine + 1] = all[i]
  end
  return mine
end

local requests, wrap, sent

function init(args)
  wrap = os.getenv("BENCH_WRAP") == "1"
  requests = wrap and slice(os.getenv("BENCH_REQUESTS"), 0, 1)
    or slice(os.getenv("BENCH_REQUESTS"), tid, tonumber(os.getenv("BENCH_THREADS")))
  sent = 0
  ran_out = false
end

function request()
  if sent == #requests then
    if not wrap then
      ran_out = true
      wrk.thread:stop()
      return ""
    end
    sent = 0
  end
  sent = sent + 1
  return requests[sent]
end

function done()
  for _, thread in ipairs(threads) do
    if thread:get("ran_out") then
      print("replay: ran out")
      return
    end
  end
end
