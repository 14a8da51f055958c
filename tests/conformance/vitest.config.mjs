// Vitest configuration for the conformance, client and dashboard suites. The include list names our
// entry files explicitly; nothing under it is excluded.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: [
      "conformance.test.mjs",
      "conformance-h2.test.mjs",
      "client.test.mjs",
      "dashboard.test.mjs",
      "state.test.mjs",
    ],
    exclude: [],
    testTimeout: 30000,
    hookTimeout: 30000,
    fileParallelism: false,
  },
});
