// Tests of the per-channel pre-RoPE key statistics (engine/kv/kv_calibration.h): the
// accumulator against statistics computed here directly in double, the floor for constant
// channels, the JSON file (round trip and every rejected input), the built-in text, and a
// calibration run of the bundled stories260K model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/kv/kv_calibration.h"
#include "engine/model/model_config.h"
#include "engine/runtime/offline_engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "temp_dir_test.h"

namespace tq {
namespace {

constexpr int32_t kLayers = 3, kHeads = 2, kDim = 8;
constexpr size_t kWidth = static_cast<size_t>(kHeads) * kDim;

// Keys [num_tokens][kHeads][kDim] for every layer; channel (l, h, c) ~ N(mu, sigma^2) with
// per-channel offsets of very different sizes (a few large ones, as in real pre-RoPE keys).
struct SyntheticKeys {
  std::vector<std::vector<float>> keys;  // [layer] -> [num_tokens * kWidth]
  std::vector<double> mu, sigma;         // [layer][head][channel]
};

SyntheticKeys MakeKeys(int32_t num_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> offset(-3.0, 3.0), log_scale(-2.0, 2.0);
  SyntheticKeys s;
  const size_t n = static_cast<size_t>(kLayers) * kWidth;
  for (size_t i = 0; i < n; ++i) {
    // Every fifth channel carries a large offset (±40).
    s.mu.push_back(i % 5 == 0 ? (i % 2 ? 40.0 : -40.0) : offset(rng));
    s.sigma.push_back(std::exp(log_scale(rng)));
  }
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int32_t l = 0; l < kLayers; ++l) {
    std::vector<float> k(static_cast<size_t>(num_tokens) * kWidth);
    for (int32_t t = 0; t < num_tokens; ++t) {
      for (size_t i = 0; i < kWidth; ++i) {
        const size_t ch = static_cast<size_t>(l) * kWidth + i;
        k[static_cast<size_t>(t) * kWidth + i] =
            static_cast<float>(s.mu[ch] + s.sigma[ch] * normal(rng));
      }
    }
    s.keys.push_back(std::move(k));
  }
  return s;
}

// Two-pass mean and population standard deviation of channel i of keys, in double.
void DirectStats(const std::vector<float>& keys, size_t i, double* mean, double* sd) {
  const size_t n = keys.size() / kWidth;
  double sum = 0.0;
  for (size_t t = 0; t < n; ++t) sum += keys[t * kWidth + i];
  *mean = sum / static_cast<double>(n);
  double ss = 0.0;
  for (size_t t = 0; t < n; ++t) {
    const double d = keys[t * kWidth + i] - *mean;
    ss += d * d;
  }
  *sd = std::sqrt(ss / static_cast<double>(n));
}

TEST(KeyStatsAccumulator, MatchesDirectStatistics) {
  constexpr int32_t kTokens = 2000;
  const SyntheticKeys s = MakeKeys(kTokens, 1234);
  KeyStatsAccumulator acc(kLayers, kHeads, kDim);
  for (int32_t l = 0; l < kLayers; ++l) acc.Add(l, s.keys[l].data(), kTokens);
  const KeyChannelStats stats = acc.Finish("synthetic");

  EXPECT_EQ(stats.num_layers, kLayers);
  EXPECT_EQ(stats.num_kv_heads, kHeads);
  EXPECT_EQ(stats.head_dim, kDim);
  EXPECT_EQ(stats.num_tokens, kTokens);
  EXPECT_EQ(stats.source, "synthetic");
  ASSERT_EQ(stats.mean.size(), kLayers * kWidth);
  ASSERT_EQ(stats.scale.size(), kLayers * kWidth);
  for (int32_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(acc.tokens(l), kTokens);
    EXPECT_EQ(stats.Mean(l), stats.mean.data() + l * kWidth);
    EXPECT_EQ(stats.Scale(l), stats.scale.data() + l * kWidth);
    for (size_t i = 0; i < kWidth; ++i) {
      const size_t ch = l * kWidth + i;
      double mean = 0.0, sd = 0.0;
      DirectStats(s.keys[l], i, &mean, &sd);
      // Equal to the direct computation up to the final rounding to float.
      EXPECT_NEAR(stats.Mean(l)[i], mean, 1e-6 * std::max(1.0, std::fabs(mean))) << ch;
      EXPECT_NEAR(stats.Scale(l)[i], sd, 1e-6 * sd) << ch;
      // And close to the distribution's parameters (5 standard errors; 10% on sigma).
      EXPECT_NEAR(mean, s.mu[ch], 5.0 * s.sigma[ch] / std::sqrt(double{kTokens})) << ch;
      EXPECT_NEAR(sd, s.sigma[ch], 0.1 * s.sigma[ch]) << ch;
    }
  }
  EXPECT_THROW(stats.Mean(kLayers), std::out_of_range);
  EXPECT_THROW(stats.Scale(-1), std::out_of_range);
}

TEST(KeyStatsAccumulator, SeveralAddsEqualOneAddOfTheConcatenation) {
  constexpr int32_t kTokens = 777;
  const SyntheticKeys s = MakeKeys(kTokens, 99);
  KeyStatsAccumulator whole(kLayers, kHeads, kDim), pieces(kLayers, kHeads, kDim);
  const std::vector<int32_t> sizes = {1, 0, 7, 300, 2, kTokens - 310};
  for (int32_t l = 0; l < kLayers; ++l) {
    whole.Add(l, s.keys[l].data(), kTokens);
    size_t begin = 0;
    for (int32_t n : sizes) {
      pieces.Add(l, s.keys[l].data() + begin * kWidth, n);
      begin += static_cast<size_t>(n);
    }
    ASSERT_EQ(begin, static_cast<size_t>(kTokens));
    EXPECT_EQ(pieces.tokens(l), kTokens);
  }
  const KeyChannelStats a = whole.Finish("whole"), b = pieces.Finish("pieces");
  EXPECT_EQ(b.num_tokens, kTokens);
  for (size_t i = 0; i < a.mean.size(); ++i) {
    EXPECT_NEAR(b.mean[i], a.mean[i], 1e-6 * std::max(1.0f, std::fabs(a.mean[i]))) << i;
    EXPECT_NEAR(b.scale[i], a.scale[i], 1e-6 * a.scale[i]) << i;
  }
}

TEST(KeyStatsAccumulator, ConstantChannelGetsPositiveFloor) {
  constexpr int32_t kTokens = 50;
  SyntheticKeys s = MakeKeys(kTokens, 7);
  // Layer 0: channel 3 of head 1 constant. Layer 1: all of head 0 constant.
  for (int32_t t = 0; t < kTokens; ++t) {
    s.keys[0][t * kWidth + 1 * kDim + 3] = 5.0f;
    for (int32_t c = 0; c < kDim; ++c) s.keys[1][t * kWidth + c] = -2.5f;
  }
  KeyStatsAccumulator acc(kLayers, kHeads, kDim);
  for (int32_t l = 0; l < kLayers; ++l) acc.Add(l, s.keys[l].data(), kTokens);
  const KeyChannelStats stats = acc.Finish("synthetic");

  double max_sd = 0.0;
  for (int32_t c = 0; c < kDim; ++c) {
    double mean = 0.0, sd = 0.0;
    DirectStats(s.keys[0], kDim + c, &mean, &sd);
    max_sd = std::max(max_sd, sd);
  }
  const float floored = stats.Scale(0)[kDim + 3];
  EXPECT_EQ(stats.Mean(0)[kDim + 3], 5.0f);
  EXPECT_TRUE(std::isfinite(floored));
  EXPECT_GT(floored, 0.0f);
  EXPECT_NEAR(floored, 1e-6 * max_sd, 1e-6 * 1e-6 * max_sd);
  for (int32_t c = 0; c < kDim; ++c) {
    EXPECT_EQ(stats.Mean(1)[c], -2.5f);
    EXPECT_EQ(stats.Scale(1)[c], 1.0f);  // the whole head was constant
  }
  for (float v : stats.scale) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_GT(v, 0.0f);
  }
}

TEST(KeyStatsAccumulator, RejectsBadInput) {
  EXPECT_THROW(KeyStatsAccumulator(0, 1, 1), std::invalid_argument);
  EXPECT_THROW(KeyStatsAccumulator(1, -1, 1), std::invalid_argument);
  EXPECT_THROW(KeyStatsAccumulator(1, 1, 0), std::invalid_argument);

  KeyStatsAccumulator acc(kLayers, kHeads, kDim);
  std::vector<float> keys(kWidth, 1.0f);
  EXPECT_THROW(acc.Add(kLayers, keys.data(), 1), std::invalid_argument);
  EXPECT_THROW(acc.Add(-1, keys.data(), 1), std::invalid_argument);
  EXPECT_THROW(acc.Add(0, keys.data(), -1), std::invalid_argument);
  EXPECT_THROW(acc.Add(0, nullptr, 1), std::invalid_argument);
  EXPECT_NO_THROW(acc.Add(0, nullptr, 0));

  // Layers 1 and 2 saw nothing.
  acc.Add(0, keys.data(), 1);
  try {
    acc.Finish("my text");
    FAIL() << "no tq::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 saw no tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("my text"), std::string::npos) << e.what();
  }
}

TEST(KeyStatsAccumulator, NonFiniteKeysAreAnError) {
  KeyStatsAccumulator acc(1, kHeads, kDim);
  std::vector<float> keys(2 * kWidth, 1.0f);
  keys[kWidth + 5] = std::numeric_limits<float>::quiet_NaN();
  acc.Add(0, keys.data(), 2);
  EXPECT_THROW(acc.Finish("nan"), Error);
}

class KeyStatsFile : public testing::TempDirTest {
 protected:
  // Load must fail with a tq::Error whose message starts with the path and contains `what`.
  void ExpectLoadError(const std::string& path, const std::string& what, int32_t layers = kLayers,
                       int32_t heads = kHeads, int32_t dim = kDim) {
    try {
      LoadKeyStats(path, layers, heads, dim);
      ADD_FAILURE() << path << ": no tq::Error (expected \"" << what << "\")";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }

  // A stats file written by hand (independently of SaveKeyStats): the header says
  // layers × heads × dim, the arrays have array_layers layers; every mean is 0.25 and every
  // scale 1.5 except the first of each, which are given as JSON text.
  std::string Write(const std::string& name, int32_t layers, int32_t heads, int32_t dim,
                    int32_t array_layers, const std::string& first_mean = "0.25",
                    const std::string& first_scale = "1.5") {
    auto tensor = [&](const std::string& first, const std::string& rest) {
      std::ostringstream o;
      o << "[";
      for (int32_t l = 0; l < array_layers; ++l) {
        o << (l ? "," : "") << "[";
        for (int32_t h = 0; h < heads; ++h) {
          o << (h ? "," : "") << "[";
          for (int32_t c = 0; c < dim; ++c) {
            o << (c ? "," : "") << (l == 0 && h == 0 && c == 0 ? first : rest);
          }
          o << "]";
        }
        o << "]";
      }
      o << "]";
      return o.str();
    };
    std::ostringstream j;
    j << "{\"format\": \"tqserve-key-channel-stats\", \"version\": 1, \"num_layers\": " << layers
      << ", \"num_kv_heads\": " << heads << ", \"head_dim\": " << dim
      << ", \"num_tokens\": 42, \"source\": \"hand-written\", \"mean\": "
      << tensor(first_mean, "0.25") << ", \"scale\": " << tensor(first_scale, "1.5") << "}\n";
    return WriteText(name, j.str());
  }

  std::string WriteText(const std::string& name, const std::string& text) {
    const std::string path = Path(name);
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(KeyStatsFile, SaveLoadRoundTripIsExact) {
  KeyChannelStats stats;
  stats.num_layers = kLayers;
  stats.num_kv_heads = kHeads;
  stats.head_dim = kDim;
  stats.num_tokens = 123456789012;
  stats.source = "built-in text";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-50.0f, 50.0f), e(-30.0f, 30.0f);
  for (size_t i = 0; i < kLayers * kWidth; ++i) {
    stats.mean.push_back(u(rng));
    stats.scale.push_back(std::exp(e(rng)));
  }
  // Awkward floats: the extremes, a subnormal, and values with no short decimal form.
  stats.mean[0] = std::numeric_limits<float>::max();
  stats.mean[1] = -std::numeric_limits<float>::denorm_min();
  stats.mean[2] = 0.1f;
  stats.scale[0] = std::numeric_limits<float>::denorm_min();
  stats.scale[1] = std::numeric_limits<float>::max();
  stats.scale[2] = 1.0f / 3.0f;

  const std::string path = Path("stats.json");
  SaveKeyStats(path, stats);
  const KeyChannelStats back = LoadKeyStats(path, kLayers, kHeads, kDim);
  EXPECT_EQ(back.num_layers, kLayers);
  EXPECT_EQ(back.num_kv_heads, kHeads);
  EXPECT_EQ(back.head_dim, kDim);
  EXPECT_EQ(back.num_tokens, stats.num_tokens);
  EXPECT_EQ(back.mean, stats.mean);  // bit-exact
  EXPECT_EQ(back.scale, stats.scale);
  EXPECT_EQ(back.source, "loaded from " + path + " (built-in text)");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // Saving again over the file replaces it.
  stats.mean[3] = 7.0f;
  SaveKeyStats(path, stats);
  EXPECT_EQ(LoadKeyStats(path, kLayers, kHeads, kDim).mean, stats.mean);
}

TEST_F(KeyStatsFile, LoadsAHandWrittenFile) {
  const std::string path = Write("ok.json", kLayers, kHeads, kDim, kLayers, "-3.5", "0.125");
  const KeyChannelStats s = LoadKeyStats(path, kLayers, kHeads, kDim);
  EXPECT_EQ(s.num_tokens, 42);
  EXPECT_EQ(s.source, "loaded from " + path + " (hand-written)");
  ASSERT_EQ(s.mean.size(), kLayers * kWidth);
  EXPECT_EQ(s.mean[0], -3.5f);
  EXPECT_EQ(s.scale[0], 0.125f);
  for (size_t i = 1; i < s.mean.size(); ++i) {
    EXPECT_EQ(s.mean[i], 0.25f);
    EXPECT_EQ(s.scale[i], 1.5f);
  }
}

TEST_F(KeyStatsFile, SaveFailsOnAnUnwritablePath) {
  KeyChannelStats stats;
  stats.num_layers = stats.num_kv_heads = stats.head_dim = 1;
  stats.mean = {0.0f};
  stats.scale = {1.0f};
  const std::string path = Path("no/such/dir/stats.json");
  try {
    SaveKeyStats(path, stats);
    FAIL() << "no tq::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
  }
  stats.scale.clear();
  EXPECT_THROW(SaveKeyStats(Path("bad.json"), stats), std::invalid_argument);
}

TEST_F(KeyStatsFile, LoadErrorsNameThePath) {
  ExpectLoadError(Path("missing.json"), "no such file");
  ExpectLoadError(WriteText("trunc.json", "{\"format\": \"tqserve-key-channel-stats\", "),
                  "invalid JSON");
  ExpectLoadError(WriteText("nan_literal.json", "{\"mean\": NaN}"), "invalid JSON");
  ExpectLoadError(WriteText("array.json", "[1, 2]"), "not a JSON object");
  ExpectLoadError(WriteText("other.json", "{\"format\": \"something else\"}"), "\"format\"");
  ExpectLoadError(WriteText("nofmt.json", "{}"), "missing field \"format\"");

  // Header shape disagrees with the model.
  const std::string good = Write("good.json", kLayers, kHeads, kDim, kLayers);
  ExpectLoadError(good, "calibrated for 3 layers, the model has 4", kLayers + 1);
  ExpectLoadError(good, "calibrated for 2 KV heads, the model has 1", kLayers, 1);
  ExpectLoadError(good, "calibrated for 8 channels", kLayers, kHeads, 16);
  // Header right, arrays of the wrong shape.
  ExpectLoadError(Write("short.json", kLayers, kHeads, kDim, kLayers - 1), "\"mean\" is not");
  ExpectLoadError(Write("inner.json", kLayers, kHeads, kDim, kLayers, "[0.25]"),
                  "\"mean\"[0][0][0] is not a finite number");
  // Values.
  ExpectLoadError(Write("neg.json", kLayers, kHeads, kDim, kLayers, "0.25", "-1.5"),
                  "scales must be positive");
  ExpectLoadError(Write("zero.json", kLayers, kHeads, kDim, kLayers, "0.25", "0"),
                  "scales must be positive");
  // NaN as nlohmann writes it (null), in a scale and in a mean.
  ExpectLoadError(Write("nan_scale.json", kLayers, kHeads, kDim, kLayers, "0.25", "null"),
                  "\"scale\"[0][0][0] is not a finite number");
  ExpectLoadError(Write("nan_mean.json", kLayers, kHeads, kDim, kLayers, "null"),
                  "\"mean\"[0][0][0] is not a finite number");
  ExpectLoadError(Write("inf.json", kLayers, kHeads, kDim, kLayers, "1e39"), "not a finite float");
  ExpectLoadError(Write("str.json", kLayers, kHeads, kDim, kLayers, "0.25", "\"1\""),
                  "not a finite number");
  // The loaded file is good for the right shape.
  EXPECT_NO_THROW(LoadKeyStats(good, kLayers, kHeads, kDim));
}

// The bundled model's tokenizer on the built-in text.
std::vector<int32_t> BuiltinTokens() {
  const ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  const auto tokenizer = Tokenizer::Load(TQ_MODEL_DIR, files.tokenizer);
  return tokenizer->Encode(BuiltinCalibrationText());
}

TEST(BuiltinCalibrationText, IsAFewHundredTokens) {
  const std::string_view text = BuiltinCalibrationText();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.substr(0, 5), "Once ");
  EXPECT_EQ(text.back(), '\n');
  const std::vector<int32_t> tokens = BuiltinTokens();
  std::printf("built-in calibration text: %zu bytes, %zu tokens (stories260K tokenizer)\n",
              text.size(), tokens.size());
  EXPECT_GE(tokens.size(), 300u);
  EXPECT_LE(tokens.size(), 1000u);
}

// Calibrates the bundled model on the built-in text, as start-up does.
TEST(KeyCalibration, BundledModelOnBuiltinText) {
  EngineOptions options;
  options.model_dir = TQ_MODEL_DIR;
  OfflineEngine gen(options);
  const ModelConfig& cfg = gen.files().config;
  std::vector<int32_t> tokens = BuiltinTokens();
  if (tokens.size() > static_cast<size_t>(gen.max_model_len())) tokens.resize(gen.max_model_len());

  KeyStatsAccumulator acc(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim);
  ForwardObserver observer{
      [&acc](int32_t layer, const float* keys, int32_t n) { acc.Add(layer, keys, n); }};
  std::vector<float> logits;
  {
    const ScopedForwardObserver scoped(gen.model(), &observer);
    logits = gen.PromptLogits(tokens);
  }
  ASSERT_EQ(logits.size(), tokens.size() * static_cast<size_t>(cfg.vocab_size));

  for (int32_t l = 0; l < cfg.num_hidden_layers; ++l) {
    EXPECT_EQ(acc.tokens(l), static_cast<int64_t>(tokens.size())) << "layer " << l;
  }
  const KeyChannelStats stats = acc.Finish("built-in text");
  EXPECT_EQ(stats.num_tokens, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(stats.source, "built-in text");
  for (size_t i = 0; i < stats.mean.size(); ++i) {
    EXPECT_TRUE(std::isfinite(stats.mean[i])) << i;
    EXPECT_TRUE(std::isfinite(stats.scale[i])) << i;
    EXPECT_GT(stats.scale[i], 0.0f) << i;
  }

  // Per layer: the largest |mean| / scale over channels (how far off-centre the channels
  // are), the spread of scales, and the largest |mean|.
  const size_t width = static_cast<size_t>(cfg.num_key_value_heads) * cfg.head_dim;
  std::printf("stories260K pre-RoPE key stats over %zu tokens of the built-in text:\n",
              tokens.size());
  std::vector<double> max_ratio(cfg.num_hidden_layers, 0.0);
  for (int32_t l = 0; l < cfg.num_hidden_layers; ++l) {
    double max_abs_mean = 0.0, min_scale = 1e30, max_scale = 0.0;
    int32_t off_centre = 0;
    for (size_t i = 0; i < width; ++i) {
      const double m = std::fabs(stats.Mean(l)[i]), s = stats.Scale(l)[i];
      max_ratio[l] = std::max(max_ratio[l], m / s);
      max_abs_mean = std::max(max_abs_mean, m);
      min_scale = std::min(min_scale, s);
      max_scale = std::max(max_scale, s);
      off_centre += m > 0.5 * s;
    }
    std::printf(
        "  layer %d: max |mean|/scale %.3f, channels with |mean| > 0.5 scale %d/%zu, "
        "max |mean| %.3f, scale %.3f..%.3f\n",
        l, max_ratio[l], off_centre, width, max_abs_mean, min_scale, max_scale);
  }
  // Keys have per-channel offsets: the reason for normalizing them per channel.
  EXPECT_GT(max_ratio[0], 0.5);
}

}  // namespace
}  // namespace tq
