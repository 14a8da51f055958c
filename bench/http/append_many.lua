-- wrk script: POST a 100-byte text/plain body to one of STREAMS streams named PREFIX-<i>,
-- chosen at random per request (the streams are created beforehand by load.mjs create).
local prefix = os.getenv("PREFIX") or "/v1/stream/many"
local streams = tonumber(os.getenv("STREAMS") or "10000")
local body = string.rep("x", 100)
local headers = { ["Content-Type"] = "text/plain" }
request = function()
  return wrk.format("POST", prefix .. "-" .. math.random(0, streams - 1), headers, body)
end
