#include "cli/terminal_text.h"

#include <gtest/gtest.h>

#include <string>

#include "base/utf8.h"

namespace runnel::cli {
namespace {

// True when `s` holds nothing a terminal acts on: it is well-formed UTF-8 (so a byte 0x80-0x9F
// can only be a continuation byte, never a raw 8-bit C1 control), with no C0 control, no DEL and
// no C1 control encoded in UTF-8 (C2 80-C2 9F).
bool NoControlBytes(const std::string& s) {
  if (!IsValidUtf8(s)) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return false;
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      return false;
    }
  }
  return true;
}

TEST(TerminalSafeTest, PrintableAsciiIsKept) {
  EXPECT_EQ(TerminalSafe("orders/2024-01 ok_~"), "orders/2024-01 ok_~");
  EXPECT_EQ(TerminalSafe(""), "");
}

TEST(TerminalSafeTest, PrintableUtf8IsKept) {
  EXPECT_EQ(TerminalSafe("café"), "café");
  EXPECT_EQ(TerminalSafe("日本"), "日本");
  EXPECT_EQ(TerminalSafe("\xF0\x9F\x99\x82"), "\xF0\x9F\x99\x82");  // U+1F642
  EXPECT_EQ(TerminalSafe("\xC2\xA0"), "\xC2\xA0");                  // U+00A0, past the C1 range
}

TEST(TerminalSafeTest, EscapeAndBellAreEscaped) {
  // Sets the terminal title to "pwned" and rings the bell.
  const std::string title = "\x1b]0;pwned\x07name";
  EXPECT_EQ(TerminalSafe(title), "\\x1b]0;pwned\\x07name");
  EXPECT_EQ(TerminalSafe("\x1b[2J"), "\\x1b[2J");  // clear screen
}

TEST(TerminalSafeTest, LineAndColumnBreaksAreEscaped) {
  EXPECT_EQ(TerminalSafe("a\nb\rc\td"), "a\\x0ab\\x0dc\\x09d");
  EXPECT_EQ(TerminalSafe(std::string("nul\0end", 7)), "nul\\x00end");
}

TEST(TerminalSafeTest, DeleteIsEscaped) {
  EXPECT_EQ(TerminalSafe("a\x7f"), "a\\x7f");
}

TEST(TerminalSafeTest, C1ControlsInUtf8AreEscaped) {
  EXPECT_EQ(TerminalSafe("\xC2\x9B"
                         "31m"),
            "\\u009b31m");  // CSI
  EXPECT_EQ(TerminalSafe("\xC2\x80\xC2\x9F"), "\\u0080\\u009f");
}

TEST(TerminalSafeTest, BytesOutsideUtf8AreEscapedOneByOne) {
  EXPECT_EQ(TerminalSafe("\x9B"
                         "2J"),
            "\\x9b2J");  // a raw 8-bit CSI
  EXPECT_EQ(TerminalSafe("\xFF\xFE"), "\\xff\\xfe");
  EXPECT_EQ(TerminalSafe("\xC3"), "\\xc3");                    // cut short
  EXPECT_EQ(TerminalSafe("\xC0\x9B"), "\\xc0\\x9b");           // overlong
  EXPECT_EQ(TerminalSafe("\xED\xA0\x80"), "\\xed\\xa0\\x80");  // a surrogate
}

TEST(TerminalSafeTest, BackslashIsEscapedSoTheOutputIsUnambiguous) {
  EXPECT_EQ(TerminalSafe("a\\b"), "a\\\\b");
  // The text "\x1b" and the byte ESC print differently.
  EXPECT_NE(TerminalSafe("\\x1b"), TerminalSafe("\x1b"));
}

TEST(TerminalSafeTest, NoInputLeavesAControlByteInTheOutput) {
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const std::string in = {static_cast<char>(a), static_cast<char>(b)};
      const std::string out = TerminalSafe(in);
      ASSERT_TRUE(NoControlBytes(out)) << "bytes " << a << " " << b << " gave " << out;
    }
  }
}

TEST(HumanTimeTest, PrintsUtcToTheSecond) {
  EXPECT_EQ(HumanTime(0), "1970-01-01 00:00:00Z");
  // 2026-12-05 23:10:00.999 UTC: the milliseconds are dropped, not rounded up.
  EXPECT_EQ(HumanTime(1796512200999ULL), "2026-12-05 23:10:00Z");
}

}  // namespace
}  // namespace runnel::cli
