-- wrk script: POST a 100-byte text/plain body, each request to the next of STREAMS streams named
-- PREFIX0 .. PREFIX<STREAMS-1> (env STREAM_PREFIX, default /v1/stream/bench-; STREAMS, default 16).
local prefix = os.getenv("STREAM_PREFIX") or "/v1/stream/bench-"
local streams = tonumber(os.getenv("STREAMS") or "16")
local body = string.rep("x", 100)
local n = 0

function init(args)
  -- Threads start at different streams so they do not all pile onto one row at first.
  n = math.random(0, streams - 1)
end

function request()
  n = (n + 1) % streams
  return wrk.format("POST", prefix .. n, { ["Content-Type"] = "text/plain" }, body)
end
