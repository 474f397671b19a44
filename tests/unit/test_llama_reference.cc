// End-to-end checks of the CPU forward pass on the bundled stories260K model
// against independent references: llama2.c's published greedy output and a
// float64 numpy forward pass (tests/reference/llama_ref.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/llama_model.h"
#include "engine/model/llama_weights.h"
#include "engine/runtime/offline_engine.h"

namespace tq {
namespace {

// Parses the "# ids [a, b, ...]" line of the published reference file.
std::vector<int32_t> ReadReferenceIds() {
  std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/reference_greedy_ids_once_upon_a_time.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# ids [", 0) != 0) continue;
    std::vector<int32_t> ids;
    std::stringstream ss(line.substr(7));
    int32_t id;
    while (ss >> id) {
      ids.push_back(id);
      ss.ignore(1);  // ',' or ']'
    }
    return ids;
  }
  return {};
}

struct F64Reference {
  std::vector<int32_t> tokens;
  std::vector<double> logits;  // [tokens, vocab]
  int32_t vocab = 0;
};

F64Reference ReadF64Reference() {
  F64Reference ref;
  std::ifstream in(std::string(TQ_REF_DIR) + "/llama_logits_f64.bin", std::ios::binary);
  char magic[7];
  in.read(magic, 7);
  EXPECT_EQ(std::string(magic, 7), "TQREF1\n");
  int32_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 4);
  in.read(reinterpret_cast<char*>(&ref.vocab), 4);
  ref.tokens.resize(n);
  in.read(reinterpret_cast<char*>(ref.tokens.data()), 4 * n);
  ref.logits.resize(static_cast<size_t>(n) * ref.vocab);
  in.read(reinterpret_cast<char*>(ref.logits.data()), 8 * ref.logits.size());
  EXPECT_TRUE(in.good()) << "reference file truncated";
  return ref;
}

EngineOptions Options(int threads = 2) {
  EngineOptions o;
  o.model_dir = TQ_MODEL_DIR;
  o.num_threads = threads;
  return o;
}

SamplingParams Greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  return p;
}

TEST(LlamaReference, GreedyIdsMatchPublishedLlama2cOutput) {
  const std::vector<int32_t> ref = ReadReferenceIds();
  ASSERT_GE(ref.size(), 104u);
  OfflineEngine gen(Options());
  const std::vector<int32_t> prompt = gen.tokenizer().Encode("Once upon a time");
  ASSERT_EQ(prompt, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  const GenerationResult out = gen.Generate(prompt, Greedy(100));
  ASSERT_EQ(out.output_ids.size(), 100u);
  for (size_t i = 0; i < 100; ++i) {
    ASSERT_EQ(out.output_ids[i], ref[4 + i]) << "first mismatch at generated token " << i;
  }
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_EQ(gen.block_pool().num_used(), 0) << "blocks leaked";
}

TEST(LlamaReference, GreedyTextContainsPublishedContinuation) {
  OfflineEngine gen(Options(1));
  const std::vector<int32_t> prompt = gen.tokenizer().Encode("Once upon a time");
  const GenerationResult out = gen.Generate(prompt, Greedy(40));
  const std::string text = gen.tokenizer().Decode(out.output_ids);
  EXPECT_NE(text.find("there was a little girl named Lily. She loved to play outside in the park."),
            std::string::npos)
      << text;
}

// Max |logit - float64 logit| over all 64 positions, for a given KV dtype.
double MaxLogitError(kernels::KvDtype dtype, int chunk) {
  const F64Reference ref = ReadF64Reference();
  EngineOptions o = Options();
  o.kv_cache_dtype = dtype;
  o.max_num_batched_tokens = chunk;
  OfflineEngine gen(o);
  EXPECT_EQ(ref.vocab, gen.files().config.vocab_size);
  const std::vector<float> logits = gen.PromptLogits(ref.tokens);
  EXPECT_EQ(logits.size(), ref.logits.size());
  double max_err = 0.0;
  for (size_t i = 0; i < logits.size() && i < ref.logits.size(); ++i) {
    max_err = std::max(max_err, std::abs(static_cast<double>(logits[i]) - ref.logits[i]));
  }
  std::printf("max |logit - float64| over %zu logits (kv %s, chunk %d): %.3g\n", logits.size(),
              std::string(kernels::KvDtypeName(dtype)).c_str(), chunk, max_err);
  return max_err;
}

TEST(LlamaReference, LogitsMatchFloat64ReferenceWithin1e3) {
  const F64Reference ref = ReadF64Reference();
  ASSERT_EQ(ref.tokens.size(), 64u);
  EXPECT_LT(MaxLogitError(kernels::KvDtype::kF32, 512), 1e-3);
}

TEST(LlamaReference, ChunkedPrefillMatchesFloat64Reference) {
  // Chunks of 7 tokens cross block boundaries (block_size 16) at odd offsets.
  EXPECT_LT(MaxLogitError(kernels::KvDtype::kF32, 7), 1e-3);
}

TEST(LlamaReference, HalfPrecisionKvStaysClose) {
  // fp16 keeps 11 significant bits, bf16 8: errors grow accordingly but stay small.
  EXPECT_LT(MaxLogitError(kernels::KvDtype::kF16, 512), 2e-2);
  EXPECT_LT(MaxLogitError(kernels::KvDtype::kBF16, 512), 1.5e-1);
}

// A varlen batch of two sequences in one forward pass gives each the logits
// it gets alone (checks token_seq, block tables and slot mapping).
TEST(LlamaReference, BatchedSequencesMatchSeparateRuns) {
  const F64Reference ref = ReadF64Reference();
  const ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  const ModelConfig& c = files.config;
  auto backend = kernels::CreateCpuBackend(2);
  LlamaModel model(c, LoadLlamaWeights(TQ_MODEL_DIR, c, backend.get()), backend.get());
  kernels::KvLayout layout{kernels::KvDtype::kF32, /*num_blocks=*/8, /*block_size=*/16,
                           c.num_key_value_heads, c.head_dim};
  PagedKvCache cache(backend.get(), c.num_hidden_layers, layout);

  // Sequence A: the 64 reference tokens in blocks {3,1,7,5}; sequence B: its
  // first 20 tokens in blocks {0,2} (B's rows padded with -1).
  const std::vector<int32_t> blocks_a = {3, 1, 7, 5};
  const std::vector<int32_t> blocks_b = {0, 2, -1, -1};
  ForwardBatch batch;
  batch.num_seqs = 2;
  batch.max_blocks_per_seq = 4;
  batch.block_tables = blocks_a;
  batch.block_tables.insert(batch.block_tables.end(), blocks_b.begin(), blocks_b.end());
  auto add = [&](int seq, const std::vector<int32_t>& blocks, int n) {
    for (int pos = 0; pos < n; ++pos) {
      batch.token_ids.push_back(ref.tokens[pos]);
      batch.positions.push_back(pos);
      batch.token_seq.push_back(seq);
      batch.slot_mapping.push_back(blocks[pos / 16] * 16 + pos % 16);
    }
    batch.logit_indices.push_back(batch.num_tokens() - 1);
  };
  add(0, blocks_a, 64);
  add(1, blocks_b, 20);
  std::vector<float> logits;
  model.Forward(batch, cache, &logits);
  ASSERT_EQ(logits.size(), 2u * c.vocab_size);
  double err_a = 0, err_b = 0;
  for (int v = 0; v < c.vocab_size; ++v) {
    err_a = std::max(err_a, std::abs(logits[v] - ref.logits[63 * ref.vocab + v]));
    err_b = std::max(err_b, std::abs(logits[c.vocab_size + v] - ref.logits[19 * ref.vocab + v]));
  }
  EXPECT_LT(err_a, 1e-3);
  EXPECT_LT(err_b, 1e-3);
}

TEST(LlamaReference, RejectsBadPrompts) {
  OfflineEngine gen(Options(1));
  EXPECT_THROW(gen.Generate({}, Greedy(4)), Error);
  const std::vector<int32_t> out_of_range = {1, 512};
  EXPECT_THROW(gen.Generate(out_of_range, Greedy(4)), Error);
  const std::vector<int32_t> too_long(gen.max_model_len() + 1, 1);
  EXPECT_THROW(gen.Generate(too_long, Greedy(4)), Error);
  SamplingParams bad = Greedy(4);
  bad.top_p = 2.0;
  EXPECT_THROW(gen.Generate(std::vector<int32_t>{1, 403}, bad), Error);
  EXPECT_EQ(gen.block_pool().num_used(), 0);
}

TEST(LlamaReference, StopsAtMaxModelLenAndEos) {
  EngineOptions o = Options(1);
  o.max_model_len = 12;
  OfflineEngine gen(o);
  const std::vector<int32_t> prompt = gen.tokenizer().Encode("Once upon a time");
  const GenerationResult out = gen.Generate(prompt, Greedy(100));
  EXPECT_EQ(out.output_ids.size(), 12u - prompt.size());
  EXPECT_EQ(out.finish_reason, "length");
  // Stop on the 3rd reference token, treated as a stop token id.
  const std::vector<int32_t> ref = ReadReferenceIds();
  SamplingParams p = Greedy(50);
  p.stop_token_ids = {ref[4 + 2]};
  const GenerationResult stopped = gen.Generate(prompt, p);
  ASSERT_FALSE(stopped.output_ids.empty());
  EXPECT_EQ(stopped.output_ids.back(), ref[4 + 2]);
  EXPECT_LE(stopped.output_ids.size(), 3u);
  EXPECT_EQ(stopped.finish_reason, "stop");
}

TEST(LlamaReference, RejectsBadEngineOptions) {
  auto expect_error = [](EngineOptions o, const std::string& needle) {
    try {
      OfflineEngine gen(o);
      ADD_FAILURE() << "no error; expected " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  EngineOptions o = Options(1);
  o.max_model_len = 513;  // stories260K's max_position_embeddings is 512
  expect_error(o, "longer than the model's context 512");
  o = Options(-1);
  expect_error(o, "--threads");
  o = Options(1);
  o.block_size = 0;
  expect_error(o, "--block-size");
  o = Options(1);
  o.max_num_batched_tokens = 0;
  expect_error(o, "--max-num-batched-tokens");
  o = Options(1);
  o.max_model_len = -1;
  expect_error(o, "--max-model-len");
}

TEST(LlamaReference, RejectsStopTokenOutsideVocabulary) {
  OfflineEngine gen(Options(1));
  SamplingParams p = Greedy(4);
  p.stop_token_ids = {512};
  EXPECT_THROW(gen.Generate(std::vector<int32_t>{1, 403}, p), Error);
  p.stop_token_ids = {511};
  EXPECT_NO_THROW(gen.Generate(std::vector<int32_t>{1, 403}, p));
}

TEST(LlamaReference, ThreadCountIsCappedAtTheCores) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(kernels::CpuThreadCount(0), cores);
  EXPECT_EQ(kernels::CpuThreadCount(1), 1);
  EXPECT_EQ(kernels::CpuThreadCount(cores + 5), cores);
  EXPECT_EQ(kernels::CpuThreadCount(100000), cores);
}

// Quantized KV caches on the bundled model: how far greedy decoding follows
// the fp32 cache (reported; the quality bound is the perplexity in eval).
TEST(LlamaReference, QuantizedKvGreedyFollowsFp32) {
  OfflineEngine fp32(Options(1));
  const std::vector<int32_t> prompt = fp32.tokenizer().Encode("Once upon a time");
  const std::vector<int32_t> want = fp32.Generate(prompt, Greedy(100)).output_ids;
  for (kernels::KvDtype dtype : {kernels::KvDtype::kInt8, kernels::KvDtype::kTq4,
                                 kernels::KvDtype::kTq3, kernels::KvDtype::kInt4}) {
    EngineOptions o = Options(1);
    o.kv_cache_dtype = dtype;
    OfflineEngine gen(o);
    const GenerationResult got = gen.Generate(prompt, Greedy(100));
    size_t prefix = 0;
    while (prefix < 100 && got.output_ids[prefix] == want[prefix]) ++prefix;
    std::printf("kv %s: first %zu of 100 greedy ids equal fp32's: %s\n",
                std::string(kernels::KvDtypeName(dtype)).c_str(), prefix,
                gen.tokenizer().Decode(got.output_ids).c_str());
    EXPECT_EQ(gen.block_pool().num_used(), 0);
    if (dtype == kernels::KvDtype::kInt8) {
      EXPECT_EQ(prefix, 100u);
    }
    // The first sentence ("there was a little girl named Lily.") survives 3 bits.
    EXPECT_GE(prefix, 10u) << kernels::KvDtypeName(dtype);
  }
}

}  // namespace
}  // namespace tq
