// IEEE 754 binary16 and bfloat16 conversions (kernels/half.h) against known bit
// patterns, exhaustive round trips, a round-to-nearest-even property check, and
// the compiler's own _Float16 conversion where it has one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/half.h"

namespace tq::kernels {
namespace {

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

bool HalfIsNan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
bool Bf16IsNan(uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

// The value of half bits h from the IEEE 754 definition, in double.
double HalfValue(uint16_t h) {
  const int sign = (h & 0x8000u) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(HalfTest, KnownHalfBitPatterns) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(0.5f), 0x3800);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(-65504.0f), 0xFBFF);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7C00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xFC00);
  EXPECT_TRUE(HalfIsNan(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(HalfIsNan(FloatToHalf(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(HalfIsNan(FloatToHalf(BitsToFloat(0x7f800001u))));  // signalling NaN payload
  EXPECT_TRUE(HalfIsNan(FloatToHalf(BitsToFloat(0x7fffffffu))));
  EXPECT_EQ(FloatToHalf(BitsToFloat(0x7f800001u)) & 0x8000, 0);
  EXPECT_EQ(FloatToHalf(BitsToFloat(0xff800001u)) & 0x8000, 0x8000);

  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7C00), INFINITY);
  EXPECT_EQ(HalfToFloat(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0xFFFF)));
  EXPECT_EQ(FloatToBits(HalfToFloat(0x8000)), 0x80000000u);  // -0 keeps its sign
}

TEST(HalfTest, HalfOverflowAndRounding) {
  // 65520 is halfway between 65504 (max) and 65536 (the next step, inf): RNE -> inf.
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7C00);

  // Ties round to even: 1 + 2^-11 is halfway between 0x3C00 and 0x3C01.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + 3 * std::ldexp(1.0f, -11), 0.0f)), 0x3C01);
  EXPECT_EQ(FloatToHalf(-(1.0f + std::ldexp(1.0f, -11))), 0xBC00);
  // Round up carrying into the exponent: 2 - 2^-12 is halfway between 0x3BFF and 2.0.
  EXPECT_EQ(FloatToHalf(2.0f - std::ldexp(1.0f, -12)), 0x4000);

  // Subnormal results: 2^-25 is halfway between 0 and 2^-24 -> 0 (even).
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 ulp -> 2
  EXPECT_EQ(FloatToHalf(5 * std::ldexp(1.0f, -25)), 0x0002);  // 2.5 ulp -> 2
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  // 1023.5 * 2^-24 ties between the largest subnormal and the smallest normal -> even.
  EXPECT_EQ(FloatToHalf(1023.5f * std::ldexp(1.0f, -24)), 0x0400);
  EXPECT_EQ(FloatToHalf(1022.5f * std::ldexp(1.0f, -24)), 0x03FE);
}

TEST(HalfTest, ExhaustiveHalfRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    if (HalfIsNan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_TRUE(HalfIsNan(FloatToHalf(f))) << std::hex << i;
      continue;
    }
    const double expected = HalfValue(h);
    ASSERT_EQ(static_cast<double>(f), expected) << std::hex << i;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << i;
  }
}

TEST(HalfTest, KnownBf16BitPatterns) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(INFINITY), 0x7F80);
  EXPECT_EQ(FloatToBf16(-INFINITY), 0xFF80);
  EXPECT_TRUE(Bf16IsNan(FloatToBf16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lives only in the low 16 bits must not become inf.
  EXPECT_TRUE(Bf16IsNan(FloatToBf16(BitsToFloat(0x7f800001u))));
  EXPECT_TRUE(Bf16IsNan(FloatToBf16(BitsToFloat(0xff800001u))));
  EXPECT_TRUE(Bf16IsNan(FloatToBf16(BitsToFloat(0x7fffffffu))));
  // Ties to even: 1 + 2^-8 lies halfway between 0x3F80 and 0x3F81.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F808000u)), 0x3F80);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F818000u)), 0x3F82);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0xBF818000u)), 0xBF82);
  // The largest float rounds past the largest bf16 (0x7F7F): inf.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7F7F7FFFu)), 0x7F7F);
  // Subnormals keep their bits (bf16 has float's exponent range).
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00010000u)), 0x0001);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00008000u)), 0x0000);  // tie -> even 0
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00018000u)), 0x0002);  // tie -> even 2

  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(Bf16ToFloat(0x7F80), INFINITY);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7FC0)));
}

TEST(HalfTest, ExhaustiveBf16RoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = Bf16ToFloat(b);
    ASSERT_EQ(FloatToBits(f), i << 16) << std::hex << i;
    if (Bf16IsNan(b)) {
      ASSERT_TRUE(Bf16IsNan(FloatToBf16(f))) << std::hex << i;
    } else {
      ASSERT_EQ(FloatToBf16(f), b) << std::hex << i;
    }
  }
}

// Checks that `rounded` (decoded with `decode`) is a nearest representable value
// of f with ties to an even encoding: its two neighbours (bits +-1 in the same
// sign) are not closer. Applies to finite results only.
template <typename Decode>
void ExpectNearestEven(float f, uint16_t rounded, uint16_t mag_mask_max, Decode decode) {
  const double x = f;
  const double r = decode(rounded);
  const double err = std::fabs(x - r);
  const uint16_t sign = rounded & 0x8000;
  const uint16_t mag = rounded & 0x7fff;
  for (int delta : {-1, 1}) {
    if (mag == 0 && delta < 0) continue;
    if (mag + delta > mag_mask_max) continue;
    const auto neighbour = static_cast<uint16_t>(sign | (mag + delta));
    const double n = decode(neighbour);
    const double nerr = std::fabs(x - n);
    ASSERT_LE(err, nerr) << "f=" << f << " got 0x" << std::hex << rounded << " neighbour 0x"
                         << neighbour;
    if (err == nerr) {
      ASSERT_EQ(rounded & 1, 0) << "tie not to even, f=" << f;
    }
  }
}

TEST(HalfTest, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> mag(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    // Half the samples in the half range (log-uniform magnitude), half arbitrary bits.
    float f;
    if (i % 2 == 0) {
      f = std::exp2(mag(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    } else {
      f = BitsToFloat(static_cast<uint32_t>(rng()));
    }
    if (std::isnan(f)) {
      ASSERT_TRUE(HalfIsNan(FloatToHalf(f)));
      ASSERT_TRUE(Bf16IsNan(FloatToBf16(f)));
      continue;
    }
    const uint16_t h = FloatToHalf(f);
    if (std::fabs(f) >= 65520.0f) {
      ASSERT_EQ(h & 0x7fff, 0x7C00) << f;
    } else {
      ASSERT_LT(h & 0x7fff, 0x7C00) << f;
      ASSERT_NO_FATAL_FAILURE(ExpectNearestEven(f, h, 0x7BFF, HalfValue));
    }
    const uint16_t b = FloatToBf16(f);
    if (std::isinf(Bf16ToFloat(b))) {
      // Only values at or beyond the midpoint between bf16 max and 2^128 overflow.
      ASSERT_GE(std::fabs(static_cast<double>(f)), std::ldexp(255.5, 120)) << f;
    } else {
      ASSERT_NO_FATAL_FAILURE(
          ExpectNearestEven(f, b, 0x7F7F, [](uint16_t v) { return double{Bf16ToFloat(v)}; }));
    }
  }
}

#if defined(__FLT16_MAX__)
TEST(HalfTest, MatchesCompilerFloat16) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> mag(-28.0f, 17.0f);
  for (int i = 0; i < 1000000; ++i) {
    float f;
    if (i % 2 == 0) {
      f = std::exp2(mag(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    } else {
      f = BitsToFloat(static_cast<uint32_t>(rng()));
    }
    const _Float16 c = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &c, 2);
    const uint16_t got = FloatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(HalfIsNan(got));
      continue;
    }
    ASSERT_EQ(got, expected) << "f=" << f << " bits 0x" << std::hex << FloatToBits(f);
    ASSERT_EQ(FloatToBits(HalfToFloat(got)), FloatToBits(static_cast<float>(c)));
  }
}
#else
TEST(HalfTest, MatchesCompilerFloat16) {
  GTEST_SKIP() << "compiler has no _Float16";
}
#endif

}  // namespace
}  // namespace tq::kernels
