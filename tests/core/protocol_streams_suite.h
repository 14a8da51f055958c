// The protocol's per-stream rules through the library's door (runnel/streams.h), run against
// every store. The HTTP door to the same rules is the conformance suite (tests/conformance,
// ctest conformance_memory / conformance_log / conformance_postgres), run by the server on the
// same core code (src/core/protocol).
#ifndef RUNNEL_TESTS_CORE_PROTOCOL_STREAMS_SUITE_H_
#define RUNNEL_TESTS_CORE_PROTOCOL_STREAMS_SUITE_H_

#include "support/store_harness.h"

namespace runnel::testing {

class ProtocolStreamsTest : public StoreTestBase {};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_CORE_PROTOCOL_STREAMS_SUITE_H_
