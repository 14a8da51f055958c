-- wrk script: GET the path in the TARGET env variable (a read at a fixed offset).
wrk.method = "GET"
wrk.path = os.getenv("TARGET") or "/v1/stream/bench?offset=-1"
