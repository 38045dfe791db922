-- The wrk script of bench.py's service section: each request posts one
-- no-op call (POST /v1/calls) with an id of its own, PREFIX-THREAD-N. A fixed
-- id would be answered from the store after its first run, without running.
--
--   wrk -t2 -c32 -d60s -s bench/wrk_calls.lua http://127.0.0.1:PORT -- PREFIX [QUOTA] [TOOL]
--
-- QUOTA: requests per thread, then the thread stops (0: until -d ends).
-- (wrk calls the first thread's request() once before the run to check
-- the script, without sending what it returns: id 1 of thread 1 is never
-- posted.) done() prints one JSON line: the counts, the latency percentiles (us),
-- and the number of ids each thread issued, for the driver to check that
-- the calls ran.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

counter = 0      -- a global: done() reads it with thread:get
local prefix, quota, tool
local headers = {["Content-Type"] = "application/json"}

function init(args)
  prefix = (args[1] or "w") .. "-" .. tid .. "-"
  quota = tonumber(args[2] or "0")
  tool = args[3] or "noop"
end

function request()
  if quota > 0 and counter >= quota then
    wrk.thread:stop()
  end
  counter = counter + 1
  return wrk.format("POST", "/v1/calls", headers,
                    '{"id":"' .. prefix .. counter .. '","tool":"' .. tool .. '"}')
end

function done(summary, latency, requests)
  local issued = {}
  for i, t in ipairs(threads) do
    issued[i] = tostring(t:get("counter"))
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d},"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f},' ..
    '"issued":[%s]}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean, table.concat(issued, ",")))
end
