// Request-derived log fields are bounded (server/guard/log_field.h, issue 41
// defect 4): the cut, the length note and UTF-8 boundaries.
#include <gtest/gtest.h>

#include <string>

#include "server/guard/log_field.h"

namespace tq::guard {
namespace {

TEST(LogField, ShortValuesAreKept) {
  EXPECT_EQ(LogField(""), "");
  EXPECT_EQ(LogField(std::string(256, 'a')), std::string(256, 'a'));
}

TEST(LogField, LongValuesAreCutWithTheirLength) {
  EXPECT_EQ(LogField(std::string(257, 'a')), std::string(256, 'a') + " ... (257 bytes)");
  const std::string megabyte(1000000, 'u');
  const std::string logged = LogField(megabyte);
  EXPECT_EQ(logged, std::string(256, 'u') + " ... (1000000 bytes)");
  EXPECT_EQ(LogField("abcdef", 3), "abc ... (6 bytes)");
}

TEST(LogField, NeverSplitsAUtf8Character) {
  // "x" then 200 x U+00E9 (C3 A9): byte 256 is an A9, so the cut backs off
  // to byte 255, after a whole character.
  std::string value = "x";
  for (int i = 0; i < 200; ++i) value += "\xC3\xA9";
  const std::string logged = LogField(value);
  EXPECT_EQ(logged.substr(0, 255), value.substr(0, 255));
  EXPECT_EQ(logged.substr(255), " ... (401 bytes)");
  // A 4-byte character (U+1F600, F0 9F 98 80) straddling the bound.
  const std::string emoji = std::string(254, 'a') + "\xF0\x9F\x98\x80" + "zz";
  EXPECT_EQ(LogField(emoji), std::string(254, 'a') + " ... (260 bytes)");
}

}  // namespace
}  // namespace tq::guard
