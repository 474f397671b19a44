// The in-process Communicator, the rank threads and the sharding plan:
// expected values are computed in the test from the collectives' definitions
// (NCCL semantics) in double precision or worked out by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "engine/parallel/cpu_communicator.h"
#include "engine/parallel/rank_executor.h"
#include "engine/parallel/tp_plan.h"
#include "kernels/half.h"

namespace tq {
namespace {

using ::testing::HasSubstr;

// Runs fn(rank, comm) on one thread per rank (the way the engine uses them).
template <typename Fn>
void OnRanks(int world, Fn fn) {
  auto comms = CreateCpuCommunicators(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { fn(r, *comms[r]); });
  for (auto& t : threads) t.join();
}

// A value that differs per rank and element and is exact in fp16 and bf16.
float Value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 0.25 * (i % 7) - 1.0);
}

TEST(CpuCommunicator, AllReduceSumFp32EveryWorldSize) {
  for (int world : {1, 2, 3, 4}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1027}}) {
      std::vector<std::vector<float>> bufs(world);
      OnRanks(world, [&](int r, Communicator& c) {
        EXPECT_EQ(c.rank(), r);
        EXPECT_EQ(c.world_size(), world);
        bufs[r].resize(count);
        for (size_t i = 0; i < count; ++i) bufs[r][i] = Value(r, i);
        c.AllReduceSum(bufs[r].data(), count, CommDtype::kF32);
      });
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < count; ++i) {
          double want = 0;
          for (int q = 0; q < world; ++q) want += Value(q, i);
          ASSERT_EQ(bufs[r][i], static_cast<float>(want)) << "world " << world << " rank " << r;
        }
      }
    }
  }
}

// Floating-point addition is not associative: 1e8 + 1 - 1e8 + 1 is 1 in rank
// order but 2 or 0 in others. Every rank must get the rank-order result, every run.
TEST(CpuCommunicator, AllReduceAddsInRankOrder) {
  const float v[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  const float want = ((v[0] + v[1]) + v[2]) + v[3];
  ASSERT_EQ(want, 1.0f);
  for (int run = 0; run < 20; ++run) {
    std::vector<float> out(4 * 64);
    OnRanks(4, [&](int r, Communicator& c) {
      std::vector<float> buf(64, v[r]);
      c.AllReduceSum(buf.data(), buf.size(), CommDtype::kF32);
      std::memcpy(out.data() + r * 64, buf.data(), 64 * sizeof(float));
    });
    for (float x : out) ASSERT_EQ(x, want);
  }
}

TEST(CpuCommunicator, AllReduceSumHalfTypesRoundOnce) {
  // fp16: 2048 + 1 + 1 is 2050 when summed in fp32 and rounded once (2049 is
  // not representable; pairwise fp16 rounding would give 2048 twice).
  OnRanks(3, [](int r, Communicator& c) {
    // bf16 (8 significant bits): 256 + 1 + 1 likewise is 258, not 256.
    const float in_h[3] = {2048.0f, 1.0f, 1.0f}, in_b[3] = {256.0f, 1.0f, 1.0f};
    std::vector<uint16_t> h(9, kernels::FloatToHalf(in_h[r]));
    std::vector<uint16_t> b(9, kernels::FloatToBf16(in_b[r]));
    c.AllReduceSum(h.data(), h.size(), CommDtype::kF16);
    c.AllReduceSum(b.data(), b.size(), CommDtype::kBF16);
    for (uint16_t x : h) EXPECT_EQ(kernels::HalfToFloat(x), 2050.0f);
    for (uint16_t x : b) EXPECT_EQ(kernels::Bf16ToFloat(x), 258.0f);
  });
}

TEST(CpuCommunicator, AllGatherConcatenatesInRankOrder) {
  for (CommDtype dtype : {CommDtype::kF32, CommDtype::kF16, CommDtype::kBF16}) {
    const int world = 3;
    const size_t count = 5, esize = CommDtypeBytes(dtype);
    OnRanks(world, [&](int r, Communicator& c) {
      std::vector<unsigned char> send(count * esize), recv(world * count * esize);
      for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<unsigned char>(r * 100 + i);
      c.AllGather(send.data(), recv.data(), count, dtype);
      for (int q = 0; q < world; ++q) {
        for (size_t i = 0; i < count * esize; ++i) {
          ASSERT_EQ(recv[q * count * esize + i], static_cast<unsigned char>(q * 100 + i))
              << CommDtypeName(dtype);
        }
      }
    });
  }
}

TEST(CpuCommunicator, BroadcastCopiesTheRootsBuffer) {
  for (int root = 0; root < 3; ++root) {
    OnRanks(3, [&](int r, Communicator& c) {
      std::vector<float> buf(17, static_cast<float>(r));
      c.Broadcast(buf.data(), buf.size(), CommDtype::kF32, root);
      for (float x : buf) ASSERT_EQ(x, static_cast<float>(root));
      EXPECT_THROW(c.Broadcast(buf.data(), 1, CommDtype::kF32, 3), std::invalid_argument);
    });
  }
}

TEST(CpuCommunicator, ManyCollectivesInARowStayInStep) {
  // Back-to-back collectives of different sizes reuse the scratch buffers.
  OnRanks(2, [](int r, Communicator& c) {
    for (int it = 0; it < 500; ++it) {
      const size_t count = 1 + (it * 37) % 300;
      std::vector<float> buf(count, static_cast<float>(r + it));
      c.AllReduceSum(buf.data(), count, CommDtype::kF32);
      for (float x : buf) ASSERT_EQ(x, static_cast<float>(2 * it + 1));
    }
  });
}

TEST(CpuCommunicator, RejectsABadWorldSize) {
  EXPECT_THROW(CreateCpuCommunicators(0), std::invalid_argument);
}

TEST(RankExecutor, RunsEveryRankAndRethrowsTheFailure) {
  auto comms = CreateCpuCommunicators(3);
  RankExecutor exec(3, {comms[0].get(), comms[1].get(), comms[2].get()});
  std::vector<float> sums(3);
  exec.Run([&](int r) {
    float x = static_cast<float>(r + 1);
    comms[r]->AllReduceSum(&x, 1, CommDtype::kF32);
    sums[r] = x;
  });
  EXPECT_THAT(sums, ::testing::Each(6.0f));
  // Rank 2 fails before its collective: ranks 0 and 1 must not wait forever,
  // and the error that comes back is rank 2's, not the abort.
  try {
    exec.Run([&](int r) {
      if (r == 2) throw std::runtime_error("rank 2 out of memory");
      float x = 1;
      comms[r]->AllReduceSum(&x, 1, CommDtype::kF32);
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rank 2 out of memory");
  }
  // The group works again after the failed step.
  exec.Run([&](int r) {
    float x = 2;
    comms[r]->AllReduceSum(&x, 1, CommDtype::kF32);
    sums[r] = x;
  });
  EXPECT_THAT(sums, ::testing::Each(6.0f));
}

ModelConfig Config(int32_t heads, int32_t kv_heads, int32_t inter, int32_t vocab) {
  ModelConfig c;
  c.hidden_size = heads * 8;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 8;
  c.intermediate_size = inter;
  c.vocab_size = vocab;
  c.num_hidden_layers = 1;
  return c;
}

TEST(TpPlan, SplitsHeadsChannelsAndVocabulary) {
  // Llama-3-8B-like: 32 heads, 8 KV heads, 14336 channels, 128256 tokens, TP 4.
  const ModelConfig c = Config(32, 8, 14336, 128256);
  const TpPlan p = MakeTpPlan(c, 3, 4);
  EXPECT_EQ(p.num_heads, 8);
  EXPECT_EQ(p.first_head, 24);
  EXPECT_EQ(p.num_kv_heads, 2);
  EXPECT_EQ(p.first_kv_head, 6);
  EXPECT_EQ(p.intermediate, 3584);
  EXPECT_EQ(p.first_intermediate, 10752);
  EXPECT_EQ(p.vocab_shard, 32064);
  EXPECT_EQ(p.first_vocab, 96192);
  EXPECT_EQ(p.vocab_rows, 32064);
}

TEST(TpPlan, ReplicatesKvHeadsWhenFewerThanRanks) {
  // 8 query heads in 2 GQA groups of 4, TP 4: ranks 0,1 use KV head 0; 2,3 head 1.
  const ModelConfig c = Config(8, 2, 16, 10);
  const int32_t want_kv[4] = {0, 0, 1, 1};
  for (int r = 0; r < 4; ++r) {
    const TpPlan p = MakeTpPlan(c, r, 4);
    EXPECT_EQ(p.num_heads, 2);
    EXPECT_EQ(p.num_kv_heads, 1);
    EXPECT_EQ(p.first_kv_head, want_kv[r]) << r;
    EXPECT_TRUE(p.kv_replicated(c));
  }
  // Vocabulary 10 over 4 ranks: shards of 3, the last holds 1 real row.
  EXPECT_EQ(MakeTpPlan(c, 3, 4).vocab_shard, 3);
  EXPECT_EQ(MakeTpPlan(c, 3, 4).vocab_rows, 1);
}

TEST(TpPlan, ClearErrorsForShapesThatDoNotSplit) {
  auto error = [](const ModelConfig& c, int world) {
    try {
      MakeTpPlan(c, 0, world);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error(Config(6, 6, 16, 10), 4), HasSubstr("num_attention_heads 6"));
  EXPECT_THAT(error(Config(8, 8, 18, 10), 4), HasSubstr("intermediate_size 18"));
  EXPECT_THAT(error(Config(12, 3, 16, 10), 2), HasSubstr("num_key_value_heads 3"));
  EXPECT_THAT(error(Config(8, 8, 16, 10), 0), HasSubstr("--tensor-parallel-size 0"));
}

}  // namespace
}  // namespace tq
