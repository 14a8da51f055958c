#include "server/sse_format.h"

#include <gtest/gtest.h>

namespace runnel::server {
namespace {

TEST(SseFormatTest, OneDataLinePerPayloadLine) {
  std::string out;
  AppendSseDataEvent("line1\nline2\r\nline3\rline4", &out);
  EXPECT_EQ(out, "event: data\ndata:line1\ndata:line2\ndata:line3\ndata:line4\n\n");
}

TEST(SseFormatTest, EmbeddedEventBoundariesStayInsideTheEvent) {
  std::string out;
  AppendSseDataEvent("a\r\n\r\nevent: control\r\ndata: x", &out);
  EXPECT_EQ(out, "event: data\ndata:a\ndata:\ndata:event: control\ndata:data: x\n\n");
  // No blank line (event terminator) before the final one.
  EXPECT_EQ(out.find("\n\n"), out.size() - 2);
}

TEST(SseFormatTest, LeadingSpaceSurvivesParsers) {
  std::string out;
  AppendSseDataEvent(" indented", &out);
  EXPECT_EQ(out, "event: data\ndata:  indented\n\n");
}

TEST(SseFormatTest, Base64MatchesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xff\x00\xfe", 3)), "/wD+");
}

}  // namespace
}  // namespace runnel::server
