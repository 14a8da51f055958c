-- wrk script: PUT a new text/plain stream per request; names are unique per thread and counter.
local counter = 0
local tag = ""
setup = function(thread)
  thread:set("tag", tostring(math.random(1, 1000000000)))
end
init = function()
  tag = wrk.thread:get("tag")
end
local headers = { ["Content-Type"] = "text/plain" }
request = function()
  counter = counter + 1
  return wrk.format("PUT", "/v1/stream/created-" .. tag .. "-" .. counter, headers)
end
