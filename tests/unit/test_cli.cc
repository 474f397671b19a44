// The tqserve binary end to end: bad model directories must fail with a
// non-zero exit and ONE stderr line naming the file and the problem;
// make-random-model must write a checkpoint that loads (and generates).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "kernels/backend_factory.h"
#include "tests/unit/temp_dir_test.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliTest : public testing::TempDirTest {
 protected:
  // Runs `tqserve <args>` (args are shell-quoted by the caller), capturing stdout/stderr.
  RunResult Run(const std::string& args) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    // timeout: a hang (e.g. a deadlock on an error path) fails the test instead of blocking.
    const std::string cmd = std::string("timeout 30 '") + TQ_BINARY + "' " + args + " >'" +
                            out.string() + "' 2>'" + err.string() + "' </dev/null";
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }

  // Expects failure with exactly one stderr line "tqserve: error: ..." holding every needle.
  void ExpectOneLineError(const RunResult& r, const std::vector<std::string>& needles) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.exit_code, 124) << "timed out (hang)";
    EXPECT_LT(r.exit_code, 128) << "crashed: " << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.back(), '\n');
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line:\n" << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith("tqserve: error: "));
    for (const auto& n : needles) EXPECT_THAT(r.err, HasSubstr(n));
  }

  // A copy of the bundled model in dir_/name.
  fs::path CopyBundled(const std::string& name) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(TQ_MODEL_DIR)) {
      if (e.is_regular_file()) fs::copy_file(e.path(), d / e.path().filename());
    }
    return d;
  }
};

TEST_F(CliTest, GenerateMissingModelDir) {
  const fs::path missing = dir_ / "no_such_model";
  const RunResult r = Run("generate --model '" + missing.string() + "' --prompt hi");
  ExpectOneLineError(r, {missing.string(), "model directory not found"});
}

TEST_F(CliTest, GenerateMissingConfigJson) {
  const fs::path d = CopyBundled("m");
  fs::remove(d / "config.json");
  const RunResult r = Run("generate --model '" + d.string() + "' --prompt hi");
  ExpectOneLineError(r, {(d / "config.json").string(), "not found"});
}

TEST_F(CliTest, GenerateTruncatedSafetensors) {
  const fs::path d = CopyBundled("m");
  const fs::path st = d / "model.safetensors";
  for (const uintmax_t size : {uintmax_t{3}, uintmax_t{2000}, uintmax_t{600000}}) {
    SCOPED_TRACE(size);
    fs::copy_file(fs::path(TQ_MODEL_DIR) / "model.safetensors", st,
                  fs::copy_options::overwrite_existing);
    fs::resize_file(st, size);
    const RunResult r = Run("generate --model '" + d.string() + "' --prompt hi --max-tokens 1");
    ExpectOneLineError(r, {st.string(), "truncated"});
  }
}

TEST_F(CliTest, GenerateCorruptHeaderAndMissingTensor) {
  const fs::path d = CopyBundled("m");
  const fs::path st = d / "model.safetensors";
  {
    std::fstream io(st, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(8);
    io.put('[');  // header no longer a JSON object
  }
  RunResult r = Run("generate --model '" + d.string() + "' --prompt hi --max-tokens 1");
  ExpectOneLineError(r, {st.string(), "JSON"});

  // Tied embeddings switched off: lm_head.weight is required but absent.
  fs::copy_file(fs::path(TQ_MODEL_DIR) / "model.safetensors", st,
                fs::copy_options::overwrite_existing);
  std::string cfg = Slurp(d / "config.json");
  const auto pos = cfg.find("\"tie_word_embeddings\": true");
  ASSERT_NE(pos, std::string::npos);
  cfg.replace(pos, 27, "\"tie_word_embeddings\": false");
  std::ofstream(d / "config.json", std::ios::trunc) << cfg;
  r = Run("generate --model '" + d.string() + "' --prompt hi --max-tokens 1");
  ExpectOneLineError(r, {d.string(), "lm_head.weight is missing"});
}

TEST_F(CliTest, GenerateUnsupportedArchitecture) {
  const fs::path d = CopyBundled("m");
  std::ofstream(d / "config.json", std::ios::trunc)
      << R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768})";
  const RunResult r = Run("generate --model '" + d.string() + "' --prompt hi");
  ExpectOneLineError(r,
                     {(d / "config.json").string(), "unsupported architecture", "GPT2LMHeadModel"});
}

TEST_F(CliTest, GenerateInvalidConfigJson) {
  const fs::path d = CopyBundled("m");
  std::ofstream(d / "config.json", std::ios::trunc) << "{\"hidden_size\": 64,\n\"vocab";
  const RunResult r = Run("generate --model '" + d.string() + "' --prompt hi");
  ExpectOneLineError(r, {(d / "config.json").string(), "invalid JSON"});
}

TEST_F(CliTest, MakeRandomModelEndToEnd) {
  const fs::path d = dir_ / "rand";
  const RunResult r =
      Run("make-random-model --out '" + d.string() +
          "' --hidden-size 64 --intermediate-size 128 --num-layers 2 --num-heads 4 "
          "--num-kv-heads 2 --vocab-size 512 --dtype bf16 --seed 3 --max-shard-bytes 50000 "
          "--tokenizer '" +
          std::string(TQ_MODEL_DIR) + "/tokenizer.model'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Embeddings + lm_head 2 x 512x64 = 65536; per layer q 64x64 + k 32x64 + v 32x64 +
  // o 64x64 = 12288, mlp 3 x 128x64 = 24576, norms 128 -> 36992; final norm 64.
  EXPECT_THAT(r.out, HasSubstr("139584 parameters"));
  EXPECT_THAT(r.out, HasSubstr(std::to_string(139584 * 2) + " bytes"));
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1);
  EXPECT_TRUE(fs::exists(d / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(d / "tokenizer.model"));

  const ModelFiles mf = LoadModelFiles(d.string());
  EXPECT_EQ(mf.config.hidden_size, 64);
  EXPECT_EQ(mf.config.num_key_value_heads, 2);
  EXPECT_EQ(mf.config.head_dim, 16);
  EXPECT_EQ(mf.config.torch_dtype, "bfloat16");
  const SafetensorsCheckpoint ckpt(d.string());
  EXPECT_EQ(ckpt.size(), 21u);
  EXPECT_EQ(ckpt.Require("model.layers.1.self_attn.v_proj.weight", {32, 64}).dtype,
            TensorDtype::kBF16);

  // The checkpoint runs through generate (random weights: any text, but it must work).
  const RunResult g =
      Run("generate --model '" + d.string() + "' --prompt 'Once upon' --max-tokens 4 --quiet");
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_THAT(g.out, ::testing::StartsWith("Once upon"));
}

TEST_F(CliTest, MakeRandomModelPresetAndErrors) {
  const fs::path d = dir_ / "p";
  RunResult r = Run("make-random-model --out '" + d.string() + "' --preset llama3-8b " +
                    "--num-layers 1 --hidden-size 256 --intermediate-size 512 --vocab-size 1000");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const ModelConfig c = LoadModelFiles(d.string()).config;
  EXPECT_EQ(c.num_hidden_layers, 1);
  EXPECT_EQ(c.num_key_value_heads, 8);  // from the preset
  EXPECT_EQ(c.head_dim, 8);             // 256 / 32 heads: follows the changed hidden size
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{128001});

  r = Run("make-random-model --out '" + d.string() + "' --preset nope");
  ExpectOneLineError(r, {"unknown random model preset 'nope'"});
  r = Run("make-random-model --out '" + d.string() +
          "' --hidden-size 64 --intermediate-size 128 --num-layers 1 --num-heads 4 "
          "--num-kv-heads 3 --vocab-size 32");
  ExpectOneLineError(r, {d.string(), "num_key_value_heads (3)"});
  r = Run("make-random-model --out '" + d.string() + "' --hidden-size 64");
  ExpectOneLineError(r, {"--intermediate-size", "required"});
}

// A request that fails validation prints nothing on stdout (the prompt is
// not echoed before the error) and one error line.
TEST_F(CliTest, GenerateRejectsBeforeEchoingThePrompt) {
  for (const std::string& args : {std::string("--max-model-len 4"), std::string("--top-p 3"),
                                  std::string("--stop-token-ids 99999")}) {
    const RunResult r = Run("generate --prompt 'Once upon a time' " + args);
    ExpectOneLineError(r, {});
    EXPECT_EQ(r.out, "") << args;
  }
}

// A bad --quantization-config or --tensor-parallel-size fails serve with one
// line before it starts listening (it used to print "listening on" first).
TEST_F(CliTest, ServeRejectsBadModelFlagsBeforeListening) {
  { std::ofstream(dir_ / "q.json") << R"({"bits": 4, "group_size": 5})"; }
  RunResult r = Run("serve --port 0 --quantization-config '" + (dir_ / "q.json").string() + "'");
  ExpectOneLineError(r, {"q.json", "group_size 5 does not divide"});
  r = Run("serve --port 0 --tensor-parallel-size 3");
  ExpectOneLineError(r, {"tensor-parallel-size"});
  if (kernels::CudaDeviceCount() == 0) {  // CI and this machine: no GPU
    r = Run("serve --port 0 --device cuda");
    ExpectOneLineError(r, {"--device cuda: "});
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("listening")));
  }
  if (kernels::CudaDeviceCount() < 2) {  // one rank per GPU
    r = Run("serve --port 0 --device cuda --tensor-parallel-size 2");
    ExpectOneLineError(r, {"--device cuda: --tensor-parallel-size 2 needs 2 CUDA devices, found"});
  }
}

// At TP=2 the weights line is rank 0's share and says so (it used to read as
// the whole model's).
TEST_F(CliTest, GenerateWeightsLineNamesTheRankUnderTensorParallelism) {
  const RunResult one = Run("generate --prompt Once --max-tokens 1");
  const RunResult two = Run("generate --prompt Once --max-tokens 1 --tensor-parallel-size 2");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  // The weights line of each run: "[tqserve] [rank 0 of 2: ]weights <size> (...)".
  const auto weights_line = [](const std::string& err, const std::string& prefix) {
    const size_t at = err.find("[tqserve] " + prefix + "weights ");
    return at == std::string::npos ? std::string() : err.substr(at, err.find('\n', at) - at);
  };
  const std::string all = weights_line(one.err, ""), share = weights_line(two.err, "rank 0 of 2: ");
  ASSERT_NE(all, "") << one.err;
  ASSERT_NE(share, "") << two.err;
  EXPECT_NE(all.substr(all.find("weights ")), share.substr(share.find("weights ")));
}

TEST_F(CliTest, UsageErrorsExitTwoAndRepeatedFlagsTakeTheLast) {
  EXPECT_EQ(Run("generate --max-tokens abc").exit_code, 2);
  EXPECT_EQ(Run("no-such-command").exit_code, 2);
  EXPECT_EQ(Run("--help").exit_code, 0);
  // Greedy: 1 token then 3 tokens; the later --max-tokens wins.
  const RunResult one = Run("generate --temperature 0 --quiet --max-tokens 1");
  const RunResult three = Run("generate --temperature 0 --quiet --max-tokens 1 --max-tokens 3");
  EXPECT_EQ(three.exit_code, 0) << three.err;
  EXPECT_GT(three.out.size(), one.out.size());
  EXPECT_THAT(three.out, ::testing::StartsWith("Once upon a time, there was"));
}

TEST_F(CliTest, GenerateWithMaxTokensZeroPrintsNoTiming) {
  const RunResult r = Run("generate --max-tokens 0");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "Once upon a time\n");
  EXPECT_THAT(r.err, HasSubstr("0 tokens generated"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("TTFT")));
}

// tq3 start-up refuses inputs that would silently wreck quality or fail later.
TEST_F(CliTest, KvCacheStartupChecks) {
  // A pool smaller than one --max-model-len sequence (vLLM refuses it too).
  ExpectOneLineError(Run("generate --kv-cache-dtype fp16 --kv-cache-memory 50000"),
                     {"--kv-cache-memory 50000", "fewer than --max-model-len 512"});
  EXPECT_EQ(Run("generate --kv-cache-memory -5").exit_code, 2);
  // Issue 41 defect 9: the range --help shows is written 1e15, so exponent
  // forms are byte counts too (5e4 = 50000, the same refusal as above).
  ExpectOneLineError(Run("generate --kv-cache-dtype fp16 --kv-cache-memory 5e4"),
                     {"--kv-cache-memory 50000", "fewer than --max-model-len 512"});
  EXPECT_THAT(Run("serve --help").out, HasSubstr("BYTES in [0 - 1e15]"));
  for (const char* bad : {"1.5e15", "2.5", "0x10", "inf", "nan", "1e", "-0", ""}) {
    const RunResult r = Run(std::string("generate --kv-cache-memory '") + bad + "'");
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("--kv-cache-memory")) << bad;
  }
  EXPECT_EQ(Run("generate --block-size 1000000").exit_code, 2);
  // A calibration text too short for per-channel statistics.
  const std::string tiny = (dir_ / "tiny.txt").string();
  std::ofstream(tiny) << "a";
  ExpectOneLineError(Run("generate --kv-cache-dtype tq3 --kv-calibration-text '" + tiny + "'"),
                     {tiny, "at least 64 are needed"});
  ExpectOneLineError(
      Run("generate --kv-cache-dtype tq3 --kv-calibration-text '" + dir_.string() + "'"),
      {dir_.string(), "not a file"});
}

TEST_F(CliTest, KvCalibrationStatsAreSavedLoadedAndTiedToTheModel) {
  const std::string stats = (dir_ / "stats.json").string();
  const RunResult saved =
      Run("generate --kv-cache-dtype tq3 --max-tokens 3 --temperature 0 --kv-calibration-stats '" +
          stats + "'");
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_THAT(saved.err, HasSubstr("calibrated on the built-in text"));
  EXPECT_THAT(saved.err, HasSubstr("saved to " + stats));
  const RunResult loaded =
      Run("generate --kv-cache-dtype tq3 --max-tokens 3 --temperature 0 --kv-calibration-stats '" +
          stats + "'");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_THAT(loaded.err, HasSubstr("loaded from " + stats));
  EXPECT_EQ(loaded.out, saved.out);  // same statistics, same greedy text

  // Stats of another model with the same shape are refused.
  const fs::path other = dir_ / "other";
  const RunResult made =
      Run("make-random-model --hidden-size 64 --num-layers 5 --num-heads 8 "
          "--num-kv-heads 4 --intermediate-size 64 --vocab-size 512 "
          "--tokenizer '" +
          std::string(TQ_MODEL_DIR) + "/tokenizer.model' --out '" + other.string() + "'");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ExpectOneLineError(Run("generate --kv-cache-dtype tq3 --model '" + other.string() +
                         "' --kv-calibration-stats '" + stats + "'"),
                     {stats, "calibrated for a different model"});
}

}  // namespace
}  // namespace tq
