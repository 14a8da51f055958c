// The protocol's per-stream rules through the library's door (runnel/streams.h), run against
// every store. The HTTP door to the same rules is the conformance suite (tests/conformance,
// ctest conformance_memory / conformance_log / conformance_postgres), run by the server on the
// same core code (src/core/protocol).
#ifndef RUNNEL_TESTS_CORE_PROTOCOL_STREAMS_SUITE_H_
#define RUNNEL_TESTS_CORE_PROTOCOL_STREAMS_SUITE_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <utility>

#include "runnel/streams.h"
#include "support/store_harness.h"

namespace runnel::testing {

class ProtocolStreamsTest : public StoreTestBase {};

// runnel::Streams on the test's clock, without the TTL grace.
class Door {
 public:
  Door(StreamRegistry& registry, ManualClock& clock, StreamsOptions options = {})
      : streams(registry, WithClock(std::move(options), clock)) {}
  Streams streams;

 private:
  static StreamsOptions WithClock(StreamsOptions options, ManualClock& clock) {
    options.ttl_grace_ms = 0;
    options.now_ms = [&clock] { return clock.NowMs(); };
    return options;
  }
};

// Creates `name` in the global scope with `content_type` and nothing else set.
inline void Make(Door& door, const std::string& name, const std::string& content_type) {
  ProtocolCreate create;
  create.content_type = content_type;
  auto made = door.streams.Create(StreamScope::Global(), name, create);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(made->created);
}

inline ProtocolAppend Text(std::string body) {
  ProtocolAppend a;
  a.content_type = "text/plain";
  a.body = std::move(body);
  return a;
}

// Unix milliseconds as RFC 3339 UTC, with milliseconds.
inline std::string Rfc3339(uint64_t ms) {
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char text[40];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  char millis[8];
  std::snprintf(millis, sizeof millis, ".%03uZ", static_cast<unsigned>(ms % 1000));
  return std::string(text) + millis;
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_CORE_PROTOCOL_STREAMS_SUITE_H_
