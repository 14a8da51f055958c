// What the State Protocol checks share: folding messages the way a State Protocol client does
// (with the official @durable-streams/state MaterializedState), a comparable snapshot of the
// result, and a deterministic pseudo-random source for the histories they write.
import { MaterializedState } from "@durable-streams/state";

// Folds messages into a MaterializedState; a reset control message starts it over.
export function fold(messages, state = new MaterializedState()) {
  for (const m of messages) {
    if (m.headers.control === "reset") state.clear();
    else if (m.headers.operation) state.apply(m);
  }
  return state;
}

// The state as a plain object with sorted types and keys, for deep equality.
export function snapshot(state) {
  const out = {};
  for (const type of state.types.sort()) {
    out[type] = Object.fromEntries([...state.getType(type).entries()].sort());
  }
  return out;
}

// A linear congruential generator from `seed`; its low bits cycle fast, so only the high ones
// are returned (0 .. 32767).
export function lcg(seed) {
  return () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return Math.floor(seed / 65536);
  };
}
