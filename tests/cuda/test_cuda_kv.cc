// KV write and paged attention on the CUDA backend against the CPU backend,
// for every KV dtype: the pools written by both must hold the same bytes
// (fp formats exactly; int8/int4/tq up to rare rounding flips of one code),
// and attention over the same pool bytes must agree, for decode (one token per
// sequence, contexts long enough for split-K), prefill chunks (many causal
// tokens per sequence; through the query-tiled prefill kernel and through the
// per-token kernel), mixed batches, GQA groups of 1 to 12, odd block sizes,
// head_dim 7 to 256 and the tq attention sink. Outputs start as NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "engine/kv/lloyd_max.h"
#include "kernels/kv_layout.h"
#include "kernels/tq/rotation.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/tq_codec_parts.h"

namespace tq::cudatest {
namespace {

using kernels::KvDtype;

// The tq codec of a test: rotation seeded by `seed`, random per-channel key
// statistics, RoPE theta 10000.
struct TqParts : TqCodecParts {
  TqParts(KvDtype dtype, int32_t hd, int32_t kv_heads, int32_t positions, uint32_t seed)
      : TqCodecParts(dtype, hd, positions, 0x5eedull + seed, 10000.0,
                     RandomFloats(static_cast<size_t>(kv_heads) * hd, seed + 1, -0.5f, 0.5f),
                     RandomFloats(static_cast<size_t>(kv_heads) * hd, seed + 2, 0.5f, 2.0f)) {}
};

struct Scenario {
  KvDtype dtype;
  int32_t head_dim;
  int32_t kv_heads;
  int32_t group;
  int32_t block_size;
  std::vector<int32_t> ctx;      // context length of each sequence
  std::vector<int32_t> queries;  // query tokens of each sequence: its last positions
  int32_t sink_tokens = 0;
};

std::string Describe(const Scenario& s) {
  std::string ctx;
  for (int32_t c : s.ctx) ctx += std::to_string(c) + ",";
  return std::string(kernels::KvDtypeName(s.dtype)) + " hd=" + std::to_string(s.head_dim) +
         " kv=" + std::to_string(s.kv_heads) + " group=" + std::to_string(s.group) +
         " bs=" + std::to_string(s.block_size) + " ctx=" + ctx +
         " sink=" + std::to_string(s.sink_tokens);
}

class CudaKv : public CudaVsCpu {
 protected:
  void Run(const Scenario& s, uint32_t seed) {
    SCOPED_TRACE(Describe(s));
    const int32_t hd = s.head_dim, heads = s.kv_heads, nseq = static_cast<int32_t>(s.ctx.size());
    const int32_t max_ctx = *std::max_element(s.ctx.begin(), s.ctx.end());
    const int32_t max_blocks = (max_ctx + s.block_size - 1) / s.block_size;
    kernels::KvLayout layout;
    layout.dtype = s.dtype;
    layout.block_size = s.block_size;
    layout.num_kv_heads = heads;
    layout.head_dim = hd;
    layout.num_blocks = nseq * max_blocks + 3;
    // Block tables: a shuffled permutation of the pool's blocks, -1 padded.
    std::vector<int32_t> ids(layout.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    std::vector<int32_t> tables(static_cast<size_t>(nseq) * max_blocks, -1);
    for (int32_t q = 0, next = 0; q < nseq; ++q) {
      for (int32_t b = 0; b < (s.ctx[q] + s.block_size - 1) / s.block_size; ++b) {
        tables[static_cast<size_t>(q) * max_blocks + b] = ids[next++];
      }
    }
    // Every position of every sequence is written (in one KvWrite call).
    std::vector<int32_t> slots, positions;
    for (int32_t q = 0; q < nseq; ++q) {
      for (int32_t j = 0; j < s.ctx[q]; ++j) {
        slots.push_back(tables[static_cast<size_t>(q) * max_blocks + j / s.block_size] *
                            s.block_size +
                        j % s.block_size);
        positions.push_back(j);
      }
    }
    slots.push_back(-1);  // a skipped token (slot < 0)
    positions.push_back(0);
    const int32_t n = static_cast<int32_t>(slots.size());
    const size_t row = static_cast<size_t>(heads) * hd;
    const std::vector<float> k = RandomFloats(n * row, seed + 10, -2.0f, 2.0f);
    const std::vector<float> v = RandomFloats(n * row, seed + 11, -2.0f, 2.0f);

    const bool tq = kernels::KvStoresPreRopeKeys(s.dtype);
    std::unique_ptr<TqParts> parts;
    if (tq) parts = std::make_unique<TqParts>(s.dtype, hd, heads, max_ctx + 8, seed);

    // CPU pools (host memory) and CUDA pools, both pre-filled with 0xA5.
    const size_t kbytes = layout.BlockBytes() * layout.num_blocks;
    const size_t vbytes = layout.VBlockBytes() * layout.num_blocks;
    std::vector<uint8_t> cpu_k(kbytes, 0xA5), cpu_v(vbytes, 0xA5);
    const size_t sink_floats = static_cast<size_t>(layout.num_blocks) * s.sink_tokens * row;
    std::vector<float> cpu_sink_k(sink_floats), cpu_sink_v(sink_floats);
    kernels::KvLayerView cpu_view{cpu_k.data(), cpu_v.data(), layout, tq ? &parts->codec : nullptr};
    if (s.sink_tokens > 0) {
      cpu_view.sink_tokens = s.sink_tokens;
      cpu_view.sink_k = cpu_sink_k.data();
      cpu_view.sink_v = cpu_sink_v.data();
    }
    cpu_->KvWrite({k.data(), v.data(), slots.data(), n, cpu_view, positions.data()});

    kernels::BackendBuffer dk = Upload(k), dv = Upload(v), dslots = Upload(slots),
                           dpos = Upload(positions);
    kernels::BackendBuffer dkpool = Upload(std::vector<uint8_t>(kbytes, 0xA5));
    kernels::BackendBuffer dvpool = Upload(std::vector<uint8_t>(vbytes, 0xA5));
    kernels::BackendBuffer dsink_k = Poisoned(std::max<size_t>(sink_floats, 1));
    kernels::BackendBuffer dsink_v = Poisoned(std::max<size_t>(sink_floats, 1));
    kernels::KvLayerView gpu_view = cpu_view;
    gpu_view.k = dkpool.data();
    gpu_view.v = dvpool.data();
    if (tq) gpu_view.tq_arrays = parts->UploadTo(cuda_.get(), layout);
    if (s.sink_tokens > 0) {
      gpu_view.sink_k = dsink_k.as<float>();
      gpu_view.sink_v = dsink_v.as<float>();
    }
    cuda_->KvWrite(
        {dk.as<float>(), dv.as<float>(), dslots.as<int32_t>(), n, gpu_view, dpos.as<int32_t>()});
    ExpectSameRecords(Download<uint8_t>(dkpool, kbytes), cpu_k, layout, layout.KRecord(), "K");
    ExpectSameRecords(Download<uint8_t>(dvpool, vbytes), cpu_v, layout, layout.VRecord(), "V");
    if (s.sink_tokens > 0) {
      // Sink rows of the first blocks hold the exact K/V; others stay as they were.
      const std::vector<float> got = Download<float>(dsink_k, sink_floats);
      for (int32_t q = 0; q < nseq; ++q) {
        const size_t b = tables[static_cast<size_t>(q) * max_blocks];
        for (size_t e = 0; e < std::min(s.sink_tokens, s.ctx[q]) * row; ++e) {
          ASSERT_EQ(got[b * s.sink_tokens * row + e], cpu_sink_k[b * s.sink_tokens * row + e]);
        }
      }
    }

    // Attention over the CPU-written bytes on both backends.
    std::vector<int32_t> token_seq, token_pos;
    for (int32_t q = 0; q < nseq; ++q) {
      for (int32_t j = s.ctx[q] - s.queries[q]; j < s.ctx[q]; ++j) {
        token_seq.push_back(q);
        token_pos.push_back(j);
      }
    }
    // A CUDA-graph padding row (position -1): reads nothing, outputs zeros.
    token_seq.push_back(0);
    token_pos.push_back(-1);
    const int32_t nq = static_cast<int32_t>(token_seq.size());
    const int32_t num_heads = heads * s.group;
    const std::vector<float> qv =
        RandomFloats(static_cast<size_t>(nq) * num_heads * hd, seed + 20, -1.5f, 1.5f);
    std::vector<float> cpu_out(qv.size(), std::nanf(""));
    kernels::PagedAttentionParams p;
    p.q = qv.data();
    p.out = cpu_out.data();
    p.token_seq = token_seq.data();
    p.token_pos = token_pos.data();
    p.block_tables = tables.data();
    p.num_tokens = nq;
    p.num_heads = num_heads;
    p.max_blocks_per_seq = max_blocks;
    p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    p.cache = cpu_view;
    cpu_->PagedAttention(p);

    kernels::BackendBuffer dq = Upload(qv), dseq = Upload(token_seq), dtpos = Upload(token_pos),
                           dtables = Upload(tables);
    kernels::BackendBuffer dk_same = Upload(cpu_k), dv_same = Upload(cpu_v);
    kernels::BackendBuffer dsk = Upload(cpu_sink_k), dsv = Upload(cpu_sink_v);
    kernels::PagedAttentionParams g = p;
    g.q = dq.as<float>();
    g.token_seq = dseq.as<int32_t>();
    g.token_pos = dtpos.as<int32_t>();
    g.block_tables = dtables.as<int32_t>();
    g.cache = gpu_view;
    g.cache.k = dk_same.data();
    g.cache.v = dv_same.data();
    if (s.sink_tokens > 0) {
      g.cache.sink_k = dsk.as<float>();
      g.cache.sink_v = dsv.as<float>();
    }
    // Twice: with the host copy of token_seq (runs of >= kPrefillMinRun
    // tokens of one sequence go to the query-tiled prefill kernel), and
    // without it (every token through the per-token decode kernel).
    for (const bool tiled : {true, false}) {
      SCOPED_TRACE(tiled ? "tiled prefill dispatch" : "per-token kernel only");
      kernels::BackendBuffer dout = Poisoned(qv.size());
      g.out = dout.as<float>();
      g.host_token_seq = tiled ? token_seq.data() : nullptr;
      cuda_->PagedAttention(g);
      ExpectClose(Download<float>(dout, qv.size()), cpu_out, 2e-4, 2e-5, "attention output");
    }
  }

  // Compares the pools record by record: fp formats must be byte-identical;
  // the quantized ones may differ in at most 1% of the records (a value on a
  // rounding boundary where the reduction orders differ), none of the 0xA5
  // fill may differ (both write exactly the record bytes).
  void ExpectSameRecords(const std::vector<uint8_t>& gpu, const std::vector<uint8_t>& cpu,
                         const kernels::KvLayout& l, kernels::KvRecord rec, const char* side) {
    ASSERT_EQ(gpu.size(), cpu.size());
    const int64_t slots = static_cast<int64_t>(l.num_blocks) * l.block_size;
    int64_t differ = 0, total = 0;
    for (int64_t slot = 0; slot < slots; ++slot) {
      for (int32_t h = 0; h < l.num_kv_heads; ++h) {
        const kernels::KvRecordAddress a = kernels::RecordAddress(l, rec, slot, h);
        const bool same = std::memcmp(gpu.data() + a.code_offset, cpu.data() + a.code_offset,
                                      rec.code_bytes) == 0 &&
                          std::memcmp(gpu.data() + a.param_offset, cpu.data() + a.param_offset,
                                      rec.param_bytes) == 0;
        differ += !same;
        ++total;
      }
    }
    const bool exact = kernels::KvDtypeElementBytes(l.dtype) > 0;
    if (exact) {
      EXPECT_EQ(differ, 0) << side << " records differ";
    } else {
      EXPECT_LE(differ, std::max<int64_t>(1, total / 100)) << side << " records differ";
    }
  }
};

constexpr KvDtype kAll[] = {KvDtype::kF32,  KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8,
                            KvDtype::kInt4, KvDtype::kTq3, KvDtype::kTq4};

TEST_F(CudaKv, BundledModelShapeEveryDtype) {  // stories260K: head_dim 8, 4 KV heads, group 2
  uint32_t seed = 100;
  for (const KvDtype dt : kAll) Run({dt, 8, 4, 2, 16, {1, 37, 80}, {1, 5, 80}}, seed++);
}

TEST_F(CudaKv, Llama3ShapeDecodeAndPrefillEveryDtype) {  // head_dim 128, 8 KV heads, group 4
  uint32_t seed = 200;
  for (const KvDtype dt : kAll) Run({dt, 128, 8, 4, 16, {300, 17, 64}, {1, 17, 9}}, seed++);
}

TEST_F(CudaKv, LongContextDecodeUsesSplitK) {  // few tokens, 5000 positions: split-K
  uint32_t seed = 300;
  for (const KvDtype dt : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kTq3, KvDtype::kTq4}) {
    Run({dt, 128, 2, 4, 16, {5000, 4097}, {1, 2}}, seed++);
  }
}

TEST_F(CudaKv, OddShapes) {
  uint32_t seed = 400;
  for (const KvDtype dt : kAll) {
    Run({dt, 64, 3, 12, 5, {23, 41}, {3, 41}}, seed++);  // group 12: two head chunks; bs 5
    Run({dt, 256, 1, 1, 7, {50}, {2}}, seed++);          // widest head
    Run({dt, 32, 2, 3, 1, {9, 1}, {9, 1}}, seed++);      // block_size 1
  }
  for (const KvDtype dt :
       {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4}) {
    Run({dt, 80, 2, 2, 16, {70}, {3}}, seed++);  // head_dim not a power of two
    Run({dt, 7, 2, 1, 16, {20}, {20}}, seed++);  // odd head_dim (int4: a half-filled byte)
  }
}

TEST_F(CudaKv, AttentionSinkKeepsFirstTokensExact) {
  uint32_t seed = 500;
  for (const KvDtype dt : {KvDtype::kTq3, KvDtype::kTq4}) {
    Run({dt, 128, 2, 4, 16, {40, 3}, {2, 3}, 4}, seed++);
    Run({dt, 8, 4, 2, 4, {30}, {30}, 4}, seed++);
    Run({dt, 128, 2, 4, 16, {40, 9}, {20, 9}, 4}, seed++);  // prefill tiles over the sink
  }
}

// Query-tiled prefill (kernels/cuda/paged_prefill.cu): chunks around the tile
// size (16 tokens at group 4, head_dim 128) at context offset 0 (the chunk is
// the whole context) and continuing a cached prefix, next to decode tokens.
TEST_F(CudaKv, PrefillChunksAtOffsetZeroAndAfterACachedPrefix) {
  uint32_t seed = 600;
  for (const KvDtype dt : {KvDtype::kF16, KvDtype::kTq3}) {
    for (const int32_t chunk : {1, 15, 16, 17, 100, 513}) {
      Run({dt, 128, 2, 4, 16, {chunk, 300 + chunk}, {chunk, chunk}}, seed++);
    }
  }
}

TEST_F(CudaKv, MixedBatchesOfPrefillChunksAndDecodeTokensEveryDtype) {
  uint32_t seed = 700;
  for (const KvDtype dt : kAll) {
    // decode, chunk after a prefix, decode, whole-prompt chunk, decode, 3-token run
    Run({dt, 64, 2, 4, 7, {40, 300, 1, 20, 77, 9}, {1, 100, 1, 20, 1, 3}}, seed++);
  }
}

TEST_F(CudaKv, PrefillGroupsBlockSizesHeadDimsEveryDtype) {
  uint32_t seed = 800;
  const int32_t block_sizes[] = {1, 7, 16};
  int b = 0;
  for (const KvDtype dt : kAll) {
    for (const int32_t hd : {64, 128, 256}) {
      for (const int32_t group : {1, 4, 8}) {
        const int32_t bs = block_sizes[b++ % 3];
        Run({dt, hd, 2, group, bs, {70, 45, 5}, {33, 45, 1}}, seed++);
      }
    }
  }
  for (const KvDtype dt :
       {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4}) {
    for (const int32_t hd : {7, 80, 200}) {  // not powers of two (tq: CPU only)
      Run({dt, hd, 2, 8, 7, {50, 3}, {50, 1}}, seed++);
    }
  }
}

TEST_F(CudaKv, PrefillChunkOverALongContextUsesSplitK) {  // one tile, 5000 positions
  uint32_t seed = 900;
  for (const KvDtype dt : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kTq3, KvDtype::kTq4}) {
    Run({dt, 128, 2, 4, 16, {5000, 700}, {16, 1}}, seed++);
  }
}

TEST_F(CudaKv, RejectsWhatTheKernelsCannotDo) {
  TqParts parts(KvDtype::kTq3, 80, 1, 16, 1);  // dense rotation: CPU only
  kernels::KvLayout l{KvDtype::kTq3, 1, 16, 1, 80};
  kernels::BackendBuffer pool = Poisoned(1024);
  kernels::KvLayerView view{pool.data(), pool.data(), l, &parts.codec,
                            parts.UploadTo(cuda_.get(), l)};
  kernels::BackendBuffer x = Poisoned(80);
  const std::vector<int32_t> zero{0};
  kernels::BackendBuffer slot = Upload(zero);
  EXPECT_THROW(cuda_->KvWrite({x.as<float>(), x.as<float>(), slot.as<int32_t>(), 1, view, nullptr}),
               std::invalid_argument);
  kernels::KvLayout wide{KvDtype::kF16, 1, 16, 1, 512};
  kernels::KvLayerView wide_view{pool.data(), pool.data(), wide, nullptr};
  EXPECT_THROW(
      cuda_->KvWrite({x.as<float>(), x.as<float>(), slot.as<int32_t>(), 1, wide_view, nullptr}),
      std::invalid_argument);
}

}  // namespace
}  // namespace tq::cudatest
