// Shared by the HTTP/2 end-to-end scripts (h2_e2e.mjs, h2_budget_e2e.mjs), which drive a real
// `runnel serve` with Node's own http2 client (no packages): the script's argument, the
// checks and their tally, and starting the server on a free loopback port.
import { spawn } from "node:child_process";

// The runnel binary named on the command line; exits with a usage line when there is none.
export function binaryArg(script) {
  const binary = process.argv[2];
  if (!binary) {
    console.error(`usage: node ${script} RUNNEL_BINARY`);
    process.exit(2);
  }
  return binary;
}

// The checks of one script: check(name, ok, detail) prints an `ok` or `not ok` line and
// counts it in tally.passed or tally.failed.
export function makeChecks() {
  const tally = { passed: 0, failed: 0 };
  const check = (name, ok, detail = "") => {
    if (ok) {
      tally.passed++;
      console.log(`ok - ${name}`);
    } else {
      tally.failed++;
      console.log(`not ok - ${name} ${detail}`);
    }
  };
  return { check, tally };
}

// Starts `runnel serve --listen 127.0.0.1:0 ARGS...`: returns the child process at once (so
// the caller can stop it whatever happens) and a promise of the URL it listens on, which
// rejects with the server's output when it exits first or names no address within 15 s.
export function startServer(binary, args) {
  const child = spawn(binary, ["serve", "--listen", "127.0.0.1:0", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const url = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no address from runnel serve:\n${log}`)), 15000);
    const onData = (d) => {
      log += d;
      const m = log.match(/http:\/\/127\.0\.0\.1:\d+/);
      if (m) {
        clearTimeout(timer);
        resolve(m[0]);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => reject(new Error(`runnel serve exited (${code}):\n${log}`)));
  });
  return { child, url };
}
