// Batched execution on the bundled model: many sequences in one forward pass
// (and with chunked prefill and preemption) must give exactly what
// tq::OfflineEngine gives for each request alone, and logprobs must equal the
// log-softmax of the single-sequence logits.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/offline_engine.h"

namespace tq {
namespace {

// "r3" (built by append: GCC 12 -O3 warns on "r" + std::to_string, a false -Wrestrict).
std::string Id(const char* prefix, int i) {
  std::string id(prefix);
  id.append(std::to_string(i));
  return id;
}

const char* kPrompts[] = {
    "Once upon a time",
    "The little dog",
    "Lily and Ben went to the park. They",
    "One day, a big",
    "Tom had a red ball. He liked to play with it every day. One day",
    "She",
    "The sun was hot and the children wanted to swim",
    "A cat",
};

EngineOptions Options(int32_t budget = 512) {
  EngineOptions o;
  o.model_dir = TQ_MODEL_DIR;
  o.num_threads = 1;
  o.kv_cache_dtype = kernels::KvDtype::kF32;
  o.max_num_batched_tokens = budget;
  return o;
}

// Counts how many sequences each step ran, and forwards to the real runner.
class CountingRunner : public ModelRunner {
 public:
  CountingRunner(ModelExecutor* executor, std::vector<int32_t>* batch_sizes)
      : inner_(executor), batch_sizes_(batch_sizes) {}
  ModelOutput Execute(const ScheduleOutput& s) override {
    batch_sizes_->push_back(static_cast<int32_t>(s.sequences.size()));
    return inner_.Execute(s);
  }

 private:
  LlamaModelRunner inner_;
  std::vector<int32_t>* batch_sizes_;
};

class CountingObserver : public EngineObserver {
 public:
  void OnPreemption() override { ++preemptions; }
  void OnStep(int32_t prompt, int32_t generated) override {
    prompt_tokens += prompt;
    generated_tokens += generated;
  }
  int preemptions = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
};

struct RunResult {
  std::map<std::string, EngineOutput> outputs;  // merged, by request id
  std::vector<int32_t> batch_sizes;
  CountingObserver observer;
};

// Runs `requests` to completion in one EngineCore over `num_blocks` blocks
// (0 = the model's own pool).
void RunAll(LoadedModel& m, const EngineOptions& o, const std::vector<EngineRequest>& requests,
            int32_t num_blocks, RunResult* run) {
  SchedulerConfig c;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_model_len = m.max_model_len;
  c.block_size = m.executor->cache().layout().block_size;
  c.num_blocks = num_blocks > 0 ? num_blocks : m.executor->cache().layout().num_blocks;
  c.eos_token_ids = m.files.config.eos_token_ids;
  EngineCore core(c, std::make_unique<CountingRunner>(m.executor.get(), &run->batch_sizes),
                  &run->observer);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& r : requests) {
    streams[r.request_id] = std::make_shared<RequestStream>();
    core.AddRequest(r, streams[r.request_id], EngineCore::Clock::now());
  }
  int steps = 0;
  while (core.has_work() && steps++ < 100000) core.Step();
  EXPECT_EQ(core.Stats().kv_blocks_used, 0) << "KV blocks leaked";
  for (auto& [id, stream] : streams) {
    EngineOutput all;
    while (auto out = stream->Next(std::chrono::milliseconds(0))) all.Merge(std::move(*out));
    EXPECT_TRUE(all.finished()) << id;
    run->outputs[id] = std::move(all);
  }
}

std::vector<EngineRequest> Requests(const Tokenizer& tok, double temperature) {
  std::vector<EngineRequest> rs;
  int i = 0;
  for (const char* p : kPrompts) {
    EngineRequest r;
    r.request_id = Id("r", i);
    r.prompt_ids = tok.Encode(p);
    r.sampling.temperature = temperature;
    r.sampling.seed = 1000 + i;
    r.sampling.max_tokens = 20 + 13 * i;
    rs.push_back(r);
    ++i;
  }
  return rs;
}

class EngineCoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    single_ = std::make_unique<OfflineEngine>(Options());
    loaded_ = std::make_unique<LoadedModel>(LoadModel(Options()));
  }
  static void TearDownTestSuite() {
    single_.reset();
    loaded_.reset();
  }
  // What OfflineEngine gives for the request alone.
  static GenerationResult Alone(const EngineRequest& r) {
    return single_->Generate(r.prompt_ids, r.sampling);
  }
  static std::unique_ptr<OfflineEngine> single_;
  static std::unique_ptr<LoadedModel> loaded_;
};
std::unique_ptr<OfflineEngine> EngineCoreTest::single_;
std::unique_ptr<LoadedModel> EngineCoreTest::loaded_;

void ExpectSameAsAlone(const std::vector<EngineRequest>& requests, RunResult& run,
                       GenerationResult (*alone)(const EngineRequest&)) {
  for (const EngineRequest& r : requests) {
    const GenerationResult want = alone(r);
    const EngineOutput& got = run.outputs[r.request_id];
    EXPECT_EQ(got.token_ids, want.output_ids) << r.request_id;
    EXPECT_EQ(FinishReasonName(got.finish), want.finish_reason) << r.request_id;
    EXPECT_EQ(got.num_output_tokens, static_cast<int32_t>(want.output_ids.size()));
    EXPECT_EQ(got.num_prompt_tokens, static_cast<int32_t>(r.prompt_ids.size()));
  }
}

TEST_F(EngineCoreTest, BatchedGreedyEqualsOneAtATime) {
  const auto requests = Requests(*loaded_->tokenizer, 0.0);
  RunResult run;
  RunAll(*loaded_, Options(), requests, 0, &run);
  ExpectSameAsAlone(requests, run, &Alone);
  // Batching happened: the first step ran every prompt together.
  ASSERT_FALSE(run.batch_sizes.empty());
  EXPECT_EQ(run.batch_sizes.front(), static_cast<int32_t>(requests.size()));
  EXPECT_EQ(run.observer.preemptions, 0);
  int64_t prompt_tokens = 0, generated = 0;
  for (const auto& r : requests) prompt_tokens += static_cast<int64_t>(r.prompt_ids.size());
  for (auto& [id, out] : run.outputs) generated += out.num_output_tokens;
  EXPECT_EQ(run.observer.prompt_tokens, prompt_tokens);
  EXPECT_EQ(run.observer.generated_tokens, generated);
}

TEST_F(EngineCoreTest, SeededSamplingEqualsOneAtATime) {
  const auto requests = Requests(*loaded_->tokenizer, 1.0);
  RunResult run;
  RunAll(*loaded_, Options(), requests, 0, &run);
  ExpectSameAsAlone(requests, run, &Alone);
}

TEST_F(EngineCoreTest, ChunkedPrefillWithSmallBudget) {
  // 7 tokens per step: prompts are split, decodes of others share the budget.
  const auto requests = Requests(*loaded_->tokenizer, 0.0);
  RunResult run;
  RunAll(*loaded_, Options(7), requests, 0, &run);
  ExpectSameAsAlone(requests, run, &Alone);
}

TEST_F(EngineCoreTest, PreemptionByRecomputeKeepsOutputs) {
  // Room for about two of these sequences at once: preemption must happen,
  // and recompute must not change a token, sampled ones included.
  for (double temperature : {0.0, 1.0}) {
    auto requests = Requests(*loaded_->tokenizer, temperature);
    for (auto& r : requests) r.sampling.max_tokens = 90;
    RunResult run;
    RunAll(*loaded_, Options(), requests, /*num_blocks=*/14, &run);
    ExpectSameAsAlone(requests, run, &Alone);
    EXPECT_GT(run.observer.preemptions, 0) << "temperature " << temperature;
    // Prompt tokens are counted once even when recomputed.
    int64_t prompt_tokens = 0;
    for (const auto& r : requests) prompt_tokens += static_cast<int64_t>(r.prompt_ids.size());
    EXPECT_EQ(run.observer.prompt_tokens, prompt_tokens);
  }
}

// log_softmax(row)[token] in double.
double LogSoftmaxAt(const float* row, int32_t vocab, int32_t token) {
  double m = row[0];
  for (int32_t i = 1; i < vocab; ++i) m = std::max(m, static_cast<double>(row[i]));
  double z = 0;
  for (int32_t i = 0; i < vocab; ++i) z += std::exp(row[i] - m);
  return row[token] - m - std::log(z);
}

TEST_F(EngineCoreTest, LogprobsMatchSingleSequenceLogits) {
  EngineRequest r;
  r.request_id = "lp";
  r.prompt_ids = loaded_->tokenizer->Encode("Lily and Ben went to the park. They");
  r.sampling.temperature = 0.7;
  r.sampling.seed = 5;
  r.sampling.max_tokens = 12;
  r.num_logprobs = 4;
  r.prompt_logprobs = true;
  RunResult run;
  RunAll(*loaded_, Options(5), {r}, 0, &run);  // budget 5: prompt logprobs across chunks
  const EngineOutput& out = run.outputs["lp"];
  ASSERT_EQ(out.logprobs.size(), out.token_ids.size());
  const int32_t np = static_cast<int32_t>(r.prompt_ids.size());
  ASSERT_EQ(out.prompt_logprobs.size(), static_cast<size_t>(np - 1));

  std::vector<int32_t> all = r.prompt_ids;
  all.insert(all.end(), out.token_ids.begin(), out.token_ids.end());
  const std::vector<float> logits = single_->PromptLogits(all);
  const int32_t vocab = loaded_->files.config.vocab_size;
  auto row = [&](int32_t pos) { return logits.data() + static_cast<size_t>(pos) * vocab; };
  for (int32_t t = 1; t < np; ++t) {
    const PositionLogprobs& p = out.prompt_logprobs[t - 1];
    EXPECT_EQ(p.chosen.token, r.prompt_ids[t]);
    EXPECT_NEAR(p.chosen.logprob, LogSoftmaxAt(row(t - 1), vocab, r.prompt_ids[t]), 1e-4);
  }
  for (size_t i = 0; i < out.token_ids.size(); ++i) {
    const int32_t pos = np - 1 + static_cast<int32_t>(i);
    const PositionLogprobs& p = out.logprobs[i];
    EXPECT_EQ(p.chosen.token, out.token_ids[i]);
    EXPECT_NEAR(p.chosen.logprob, LogSoftmaxAt(row(pos), vocab, out.token_ids[i]), 1e-4);
    ASSERT_EQ(p.top.size(), 4u);
    // The top list is the 4 largest raw logits, descending.
    std::vector<std::pair<float, int32_t>> sorted;
    for (int32_t v = 0; v < vocab; ++v) sorted.push_back({-row(pos)[v], v});
    std::sort(sorted.begin(), sorted.end());
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(p.top[k].token, sorted[k].second) << "position " << pos << " rank " << k;
      EXPECT_NEAR(p.top[k].logprob, LogSoftmaxAt(row(pos), vocab, sorted[k].second), 1e-4);
    }
  }
}

}  // namespace
}  // namespace tq
