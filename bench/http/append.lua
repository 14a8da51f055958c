-- wrk script: POST a 100-byte text/plain body to the stream named by the STREAM env variable.
local stream = os.getenv("STREAM") or "/v1/stream/bench"
wrk.method = "POST"
wrk.path = stream
wrk.headers["Content-Type"] = "text/plain"
wrk.body = string.rep("x", 100)
