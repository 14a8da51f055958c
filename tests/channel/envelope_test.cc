// MessageEnvelope's canonical encoding (K6) and its decoder's refusals (V7).
#include <string>

#include <gtest/gtest.h>

#include "core/channel/envelope_format.h"
#include "runnel/channel.h"

namespace runnel {
namespace {

MessageEnvelope Full() {
  MessageEnvelope e;
  e.payload = std::string("bin\0ary\xff", 8);
  e.causal_context = CausalContext{"parent-é", 42};
  e.timestamp_ms = 0x0102030405060708ull;
  e.publisher_id = "pub";
  e.idempotency_key = "idem";
  e.key = "user-1";
  return e;
}

std::string Hex(std::string_view s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

TEST(EnvelopeTest, K6_RoundTripsByteIdentically) {
  const MessageEnvelope e = Full();
  const std::string bytes = EncodeEnvelope(e);
  auto decoded = DecodeEnvelope(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, e);
  EXPECT_EQ(EncodeEnvelope(*decoded), bytes);
}

TEST(EnvelopeTest, K6_EveryOptionalCombinationRoundTrips) {
  for (int mask = 0; mask < 32; ++mask) {
    MessageEnvelope e;
    e.payload = "p";
    e.publisher_id = "x";
    if (mask & 1) e.idempotency_key = "k";
    if (mask & 2) e.key = "";
    if (mask & 4) e.causal_context = CausalContext{};
    if ((mask & 4) && (mask & 8)) e.causal_context->parent_id = "par";
    if ((mask & 4) && (mask & 16)) e.causal_context->vector_clock_entry = ~uint64_t{0};
    auto decoded = DecodeEnvelope(EncodeEnvelope(e));
    ASSERT_TRUE(decoded.ok()) << mask << ": " << decoded.status().ToString();
    EXPECT_EQ(*decoded, e) << mask;
  }
}

// The documented layout (docs/formats/envelope.md), pinned so it cannot drift unnoticed.
TEST(EnvelopeTest, K6_GoldenBytes) {
  MessageEnvelope e;
  e.payload = "hi";
  e.timestamp_ms = 1;
  e.publisher_id = "p";
  e.idempotency_key = "k";
  EXPECT_EQ(Hex(EncodeEnvelope(e)),
            "4c4d4531"          // "LME1"
            "01"                // version
            "0100000000000000"  // timestamp_ms
            "0100000070"        // publisher_id "p"
            "01010000006b"      // idempotency_key present, "k"
            "00"                // key absent
            "00"                // causal_context absent
            "020000006869");    // payload "hi"
}

TEST(EnvelopeTest, V7_EveryTruncationIsRefused) {
  const std::string bytes = EncodeEnvelope(Full());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto decoded = DecodeEnvelope(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(decoded.ok()) << "prefix of " << n << " bytes decoded";
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption);
    EXPECT_EQ(decoded.status().message().rfind("EnvelopeError: ", 0), 0u);
  }
}

TEST(EnvelopeTest, V7_TrailingBytesAreRefused) {
  auto decoded = DecodeEnvelope(EncodeEnvelope(Full()) + "x");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption);
  EXPECT_NE(decoded.status().message().find("trailing"), std::string_view::npos);
}

TEST(EnvelopeTest, V7_BadMagicAndUnknownVersionAreRefused) {
  std::string bytes = EncodeEnvelope(Full());
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  EXPECT_EQ(DecodeEnvelope(bad_magic).status().code(), StatusCode::kCorruption);
  std::string bad_version = bytes;
  bad_version[4] = 2;
  auto decoded = DecodeEnvelope(bad_version);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("version 2"), std::string_view::npos);
}

TEST(EnvelopeTest, V7_PresenceByteOtherThanZeroOrOneIsRefused) {
  MessageEnvelope e;
  e.publisher_id = "p";
  std::string bytes = EncodeEnvelope(e);
  // magic 4 + version 1 + timestamp 8 + publisher (4 + 1) = 18: the idempotency presence byte.
  ASSERT_EQ(bytes[18], 0);
  bytes[18] = 2;
  EXPECT_EQ(DecodeEnvelope(bytes).status().code(), StatusCode::kCorruption);
}

TEST(EnvelopeTest, V7_InvalidUtf8IsRefused) {
  const std::string bad[] = {
      std::string("\xC0\x80", 2),          // overlong NUL
      std::string("\xED\xA0\x80", 3),      // surrogate
      std::string("\x80", 1),              // lone continuation
      std::string("\xF4\x90\x80\x80", 4),  // above U+10FFFF
      std::string("\xE2\x82", 2),          // truncated sequence
  };
  for (const std::string& s : bad) {
    MessageEnvelope e;
    e.publisher_id = std::string(s.size(), 'a');
    std::string bytes = EncodeEnvelope(e);
    // Overwrite the publisher id's bytes (they start after its 4-byte length at offset 13).
    bytes.replace(17, s.size(), s);
    auto decoded = DecodeEnvelope(bytes);
    ASSERT_FALSE(decoded.ok()) << Hex(s);
    EXPECT_NE(decoded.status().message().find("UTF-8"), std::string_view::npos);
  }
  EXPECT_TRUE(channel::IsValidUtf8("plain ascii, é, 😀"));
}

TEST(EnvelopeTest, PayloadIsOpaqueBytes) {
  MessageEnvelope e;
  e.payload = std::string("\xC0\x80\x00\xff", 4);
  auto decoded = DecodeEnvelope(EncodeEnvelope(e));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->payload, e.payload);
}

}  // namespace
}  // namespace runnel
