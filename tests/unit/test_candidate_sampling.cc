// Sampling from LogitsTopK candidates (LlamaModelRunner SamplingPath::
// kCandidates, here on the CPU backend) against the full-row host path:
// every token, logprob and top-logprob list must be identical, on the
// bundled model (peaked distributions: candidates decide) and on a random
// model with a 40,000-token vocabulary (flat: most draws fall back to the
// full row). LogprobsFromCandidates is checked against ComputeLogprobs.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/model/decode_graphs.h"
#include "engine/model/random_model.h"
#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/model_runner.h"
#include "kernels/cpu/cpu_topk.h"
#include "tests/unit/temp_dir_test.h"

namespace tq {
namespace {

// Forwards to a LlamaModelRunner and keeps a pointer to read its counters.
class PeekRunner : public ModelRunner {
 public:
  PeekRunner(ModelExecutor* executor, SamplingPath path, LlamaModelRunner** peek)
      : inner_(executor, path) {
    *peek = &inner_;
  }
  ModelOutput Execute(const ScheduleOutput& s) override { return inner_.Execute(s); }

 private:
  LlamaModelRunner inner_;
};

struct RunResult {
  std::map<std::string, EngineOutput> outputs;
  int64_t candidate_rows = 0, fallbacks = 0, graph_steps = 0;
};

// graphs: decode steps through DecodeGraphRunner's padded buckets (run
// eagerly on the CPU backend), which leave the logits on the device.
RunResult RunAll(const std::string& model_dir, SamplingPath path,
                 const std::vector<EngineRequest>& requests, bool graphs = false) {
  EngineOptions o;
  o.model_dir = model_dir;
  o.num_threads = 2;
  o.kv_cache_dtype = kernels::KvDtype::kF32;
  o.max_model_len = 256;
  LoadedModel m = LoadModel(o);
  const int32_t block_size = m.executor->cache().layout().block_size;
  if (graphs) {
    m.executor->model().EnableDecodeGraphs(16, (m.max_model_len + block_size - 1) / block_size,
                                           /*eager_fallback=*/true);
  }
  SchedulerConfig c;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 256;
  c.max_model_len = m.max_model_len;
  c.block_size = block_size;
  c.num_blocks = m.executor->cache().layout().num_blocks;
  c.eos_token_ids = m.files.config.eos_token_ids;
  LlamaModelRunner* runner = nullptr;
  EngineCore core(c, std::make_unique<PeekRunner>(m.executor.get(), path, &runner), nullptr);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& r : requests) {
    streams[r.request_id] = std::make_shared<RequestStream>();
    core.AddRequest(r, streams[r.request_id], EngineCore::Clock::now());
  }
  int steps = 0;
  while (core.has_work() && steps++ < 10000) core.Step();
  RunResult run;
  for (auto& [id, stream] : streams) {
    EngineOutput all;
    while (auto out = stream->Next(std::chrono::milliseconds(0))) all.Merge(std::move(*out));
    EXPECT_TRUE(all.finished()) << id;
    run.outputs[id] = std::move(all);
  }
  run.candidate_rows = runner->candidate_rows();
  run.fallbacks = runner->full_row_fallbacks();
  if (graphs) {
    for (const auto& [bucket, steps] : m.executor->model().decode_graphs()->steps_per_bucket()) {
      run.graph_steps += steps;
    }
  }
  return run;
}

// Greedy, seeded temperature / top-p / top-k / min-p, penalties (host rows
// in the same batch), logprobs and prompt logprobs.
std::vector<EngineRequest> Requests() {
  std::vector<EngineRequest> rs;
  auto add = [&](auto&& set) {
    EngineRequest r;
    r.request_id = "r" + std::to_string(rs.size());
    r.prompt_ids = {1, 403, 407, 261, 378, 425, static_cast<int32_t>(300 + rs.size())};
    r.sampling.seed = 77 + rs.size();
    r.sampling.max_tokens = 24;
    r.sampling.ignore_eos = true;
    set(r);
    rs.push_back(r);
  };
  add([](EngineRequest& r) {
    r.sampling.temperature = 0;
    r.num_logprobs = 5;
  });
  add([](EngineRequest& r) { r.sampling.temperature = 1.0; });
  add([](EngineRequest& r) {
    r.sampling.temperature = 0.8;
    r.sampling.top_p = 0.9;
    r.num_logprobs = 3;
  });
  add([](EngineRequest& r) {
    r.sampling.temperature = 1.2;
    r.sampling.top_k = 20;
    r.sampling.min_p = 0.05;
    r.num_logprobs = 0;
  });
  add([](EngineRequest& r) {
    r.sampling.temperature = 1.5;
    r.sampling.top_p = 0.95;
    r.num_logprobs = 20;
    r.prompt_logprobs = true;
  });
  add([](EngineRequest& r) {
    r.sampling.temperature = 0.9;
    r.sampling.repetition_penalty = 1.3;
    r.sampling.presence_penalty = 0.5;
    r.num_logprobs = 2;
  });
  return rs;
}

void ExpectSameLogprobs(const PositionLogprobs& a, const PositionLogprobs& b,
                        const std::string& where) {
  EXPECT_EQ(a.chosen.token, b.chosen.token) << where;
  EXPECT_EQ(a.chosen.logprob, b.chosen.logprob) << where;
  ASSERT_EQ(a.top.size(), b.top.size()) << where;
  for (size_t j = 0; j < a.top.size(); ++j) {
    EXPECT_EQ(a.top[j].token, b.top[j].token) << where << " top " << j;
    EXPECT_EQ(a.top[j].logprob, b.top[j].logprob) << where << " top " << j;
  }
}

void ExpectSameRuns(const RunResult& host, const RunResult& cand) {
  ASSERT_EQ(host.outputs.size(), cand.outputs.size());
  for (const auto& [id, h] : host.outputs) {
    const EngineOutput& c = cand.outputs.at(id);
    ASSERT_EQ(h.token_ids, c.token_ids) << id;
    ASSERT_EQ(h.logprobs.size(), c.logprobs.size()) << id;
    for (size_t i = 0; i < h.logprobs.size(); ++i) {
      ExpectSameLogprobs(h.logprobs[i], c.logprobs[i], id + " token " + std::to_string(i));
    }
    ASSERT_EQ(h.prompt_logprobs.size(), c.prompt_logprobs.size()) << id;
    for (size_t i = 0; i < h.prompt_logprobs.size(); ++i) {
      ExpectSameLogprobs(h.prompt_logprobs[i], c.prompt_logprobs[i], id + " prompt");
    }
  }
}

TEST(CandidateSampling, BundledModelSameAsHostPath) {
  const std::vector<EngineRequest> rs = Requests();
  const RunResult host = RunAll(TQ_MODEL_DIR, SamplingPath::kHost, rs);
  const RunResult cand = RunAll(TQ_MODEL_DIR, SamplingPath::kCandidates, rs);
  EXPECT_EQ(host.candidate_rows, 0);
  // Five of the six requests have no penalties: 5 x 24 rows from candidates.
  EXPECT_EQ(cand.candidate_rows, 5 * 24);
  EXPECT_LT(cand.fallbacks, cand.candidate_rows);
  ExpectSameRuns(host, cand);
  // Decode steps from graph buckets keep the same results.
  const RunResult graphs = RunAll(TQ_MODEL_DIR, SamplingPath::kCandidates, rs, true);
  EXPECT_GT(graphs.graph_steps, 10);
  ExpectSameRuns(host, graphs);
}

class CandidateSamplingLargeVocab : public testing::TempDirTest {};

TEST_F(CandidateSamplingLargeVocab, RandomModelSameAsHostPath) {
  RandomModelSpec spec;
  ModelConfig& c = spec.config;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 40000;  // >= kCandidateSamplingMinVocab
  c.max_position_embeddings = 256;
  c.eos_token_ids = {2};
  spec.dtype = TensorDtype::kF32;
  spec.seed = 3;
  WriteRandomModel(dir_.string(), spec, std::string(TQ_MODEL_DIR) + "/tokenizer.model");
  const std::vector<EngineRequest> rs = Requests();
  const RunResult host = RunAll(dir_.string(), SamplingPath::kHost, rs);
  const RunResult cand = RunAll(dir_.string(), SamplingPath::kCandidates, rs);
  EXPECT_EQ(cand.candidate_rows, 5 * 24);
  EXPECT_GT(cand.fallbacks, 0);  // near-uniform logits: tail draws need the row
  ExpectSameRuns(host, cand);
}

TEST(CandidateSampling, LogprobsFromCandidatesEqualComputeLogprobs) {
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int> level(-8, 8);
  int decided = 0, undecided = 0;
  for (int32_t vocab : {5, 100, 3000}) {
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<float> row(static_cast<size_t>(vocab));
      for (float& l : row) l = 0.125f * static_cast<float>(level(rng));  // ties
      row[static_cast<size_t>(trial) % row.size()] = std::numeric_limits<float>::quiet_NaN();
      const int32_t k = std::min(vocab, 16);
      std::vector<int32_t> ids(static_cast<size_t>(k));
      std::vector<float> values(static_cast<size_t>(k));
      LogitCandidates c;
      c.vocab = vocab;
      kernels::cpu::LogitsTopKRow(row.data(), vocab, k, 1.0f, ids.data(), values.data(), &c.sum_exp,
                                  &c.sum_exp_scaled, nullptr);
      c.ids = ids;
      c.values = values;
      const int32_t token = ids[static_cast<size_t>(trial) % ids.size()];
      for (int32_t n : {0, 1, 5, 20}) {
        const std::optional<PositionLogprobs> got = LogprobsFromCandidates(c, token, n);
        (got ? decided : undecided)++;
        if (got)
          ExpectSameLogprobs(ComputeLogprobs(row, token, n), *got,
                             "vocab " + std::to_string(vocab));
      }
      EXPECT_FALSE(LogprobsFromCandidates(c, -1, 0)) << "a token outside the candidates";
    }
  }
  EXPECT_GT(decided, 100);
  EXPECT_GT(undecided, 10);
}

}  // namespace
}  // namespace tq
