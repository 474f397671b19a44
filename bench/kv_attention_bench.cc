// CPU cost of one decode attention call per KV cache format (issue 3):
// PagedAttention for one new query token per sequence at head_dim 128,
// 8 KV heads, 32 query heads (GQA 4), over a paged cache of the given
// context, for fp32 / fp16 / int8 / int4 / tq3 / tq4 (and bf16 on request).
//
//   tq_bench_kv_attention [--contexts 1024,4096,16384] [--threads 1]
//                         [--repeats 9] [--seqs 1] [--dtypes fp32,...]
//                         [--warm-cache] [--no-breakdown] [--query-rows 1]
//                         [--clock wall|cpu]
//
// One cache per dtype (1 layer, block_size 16, blocks in a shuffled order as a
// long-running pool hands them out) is filled once with KvWrite of the same
// random K/V (keys = mean + scale * N(0, 1) per channel, the statistics the tq
// codec is given). Each repeat then runs every (context, threads, dtype) once,
// dtypes interleaved so background load hits all alike; a 64 MiB buffer is
// read before every timed call (unless --warm-cache) so the KV comes from
// DRAM as in a real decode step, where the other layers' weights and KV pass
// through the caches between two calls on one layer. Reported: median µs per
// call, ratio to fp32 of the same run, KV bytes the call reads (records of
// positions [0, ctx) for all KV heads, K and V), bytes / time and a hash of
// the output bits (equal hashes from two builds: no output bit changed).
// --query-rows N > 1 measures prefill attention instead: N query rows per
// sequence at positions ctx - N .. ctx - 1 (the last chunk of a prefill of
// ctx tokens; N = ctx: the whole prompt) in one call. --clock cpu times each
// call by the process's CPU time (with 1 thread the call runs on the calling
// thread, so time the OS gave to other processes is not counted: steadier on
// a loaded machine; with more threads it also counts the pool's spinning).
// Also measured: quantize-on-write (KvWrite of one token per call, as in
// decode) and, with the breakdown, the per-record cost of each stage of the
// tq path on one thread (warm caches).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/tq_codec_state.h"
#include "engine/model/model_config.h"
#include "kernels/backend.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/kv_layout.h"
#include "kernels/tq/bitplanes.h"
#include "kernels/tq/rotation.h"
// simd.h's Dot compiled for this file's own flags (-march=native under
// TQ_NATIVE, tq_target_cpu_isa below in bench/CMakeLists.txt): level 0 of
// isa_begin.h takes the ISA of the command line, in namespace isa_baseline.
#define TQ_CPU_ISA_LEVEL 0
#include "kernels/cpu/isa_begin.h"
#include "kernels/cpu/simd.h"

namespace {

using tq::kernels::KvDtype;
using Clock = std::chrono::steady_clock;
using tq::bench::LoadAvg;
using tq::bench::Median;
using tq::bench::ProcessCpuSeconds;
using tq::bench::Seconds;

constexpr int32_t kHeadDim = 128;
constexpr int32_t kKvHeads = 8;
constexpr int32_t kHeads = 32;
constexpr int32_t kBlock = 16;

struct Args {
  std::vector<int32_t> contexts = {1024, 4096, 16384};
  std::vector<int32_t> threads = {1};
  std::vector<KvDtype> dtypes = {KvDtype::kF32,  KvDtype::kF16, KvDtype::kInt8,
                                 KvDtype::kInt4, KvDtype::kTq3, KvDtype::kTq4};
  int repeats = 9;
  int32_t seqs = 1;
  int32_t write_tokens = 256;
  bool cold = true;
  bool breakdown = true;
  int32_t query_rows = 1;  // per sequence; > 1: prefill attention
  bool cpu_clock = false;  // --clock cpu: process CPU time per call
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  CLI::App app("CPU cost of one decode (or prefill) attention call per KV cache format.",
               "tq_bench_kv_attention");
  tq::bench::AddList(app, "--contexts", a.contexts, "Context lengths")->check(CLI::PositiveNumber);
  tq::bench::AddList(app, "--threads", a.threads, "Thread counts")->check(CLI::PositiveNumber);
  app.add_option("--repeats", a.repeats)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seqs", a.seqs)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--dtypes", a.dtypes, "KV dtypes [fp32,fp16,int8,int4,tq3,tq4]")
      ->delimiter(',')
      ->transform(tq::bench::KvDtypeName());
  app.add_option("--write-tokens", a.write_tokens)
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--warm-cache{false}", a.cold, "No cache flush before each timed call");
  app.add_flag("--no-breakdown{false}", a.breakdown, "Skip the per-stage cost breakdown");
  app.add_option("--query-rows", a.query_rows, "Query rows per sequence (> 1: prefill)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--clock", a.cpu_clock, "wall or cpu (process CPU time per call)")
      ->transform(
          CLI::CheckedTransformer(std::map<std::string, bool>{{"wall", false}, {"cpu", true}}));
  tq::bench::ParseOrExit(app, argc, argv);
  return a;
}

// Reads a buffer larger than the last-level cache so the next call's KV comes
// from DRAM.
class CacheFlusher {
 public:
  explicit CacheFlusher(size_t bytes) : buf_(bytes / sizeof(uint64_t), 1) {}
  void Flush() {
    uint64_t sum = 0;
    for (size_t i = 0; i < buf_.size(); i += 8) sum += buf_[i];
    sink_ += sum;
  }
  uint64_t sink() const { return sink_; }

 private:
  std::vector<uint64_t> buf_;
  uint64_t sink_ = 0;
};

tq::ModelConfig BenchConfig(int32_t max_positions) {
  tq::ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = kHeads * kHeadDim;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 1;
  c.num_attention_heads = kHeads;
  c.num_key_value_heads = kKvHeads;
  c.head_dim = kHeadDim;
  c.vocab_size = 128256;
  c.max_position_embeddings = std::max(max_positions, 16384);
  c.rope_theta = 500000.0;
  return c;
}

struct Case {
  KvDtype dtype;
  std::shared_ptr<const tq::TqCodecState> tq;
  std::unique_ptr<tq::PagedKvCache> cache;
  double fill_s = 0.0;
  size_t bytes_per_token = 0;  // K + V records of all KV heads
};

// Per-record cost of each stage of the tq key/value path on one thread, over
// the first `ctx` records of every KV head (warm caches): which costs dominate.
void Breakdown(const std::vector<Case>& cases, const std::vector<int32_t>& table, int32_t ctx,
               int repeats) {
  namespace k = tq::kernels;
  namespace cpu = tq::kernels::cpu;
  std::mt19937_64 rng(99);
  std::normal_distribution<float> normal;
  std::vector<float> q(static_cast<size_t>(kHeads) * kHeadDim);
  for (float& e : q) e = normal(rng);
  const int32_t group = kHeads / kKvHeads;
  const size_t records = static_cast<size_t>(ctx) * kKvHeads;
  std::printf(
      "\n## Breakdown: ns per record (one KV head vector), 1 thread, warm caches, "
      "context %d, median of %d\n\n",
      ctx, repeats);
  std::printf("| dtype | stage | ns/record | ms per call (x %zu records) |\n|---|---|---:|---:|\n",
              records);
  float sink = 0.0f;
  for (const Case& c : cases) {
    if (c.dtype != KvDtype::kTq3 && c.dtype != KvDtype::kF32) continue;
    const k::KvLayerView view = c.cache->Layer(0);
    const k::KvLayout& l = view.layout;
    const k::KvRecord krec = l.KRecord(), vrec = l.VRecord();
    const k::TqLayerCodec* codec = view.tq;
    const bool is_tq = codec != nullptr;
    const int32_t kbits = k::TqKeyBits(l.dtype);
    const auto* kpool = static_cast<const uint8_t*>(view.k);
    const auto* vpool = static_cast<const uint8_t*>(view.v);
    std::vector<float> head(kHeadDim), out(static_cast<size_t>(group) * kHeadDim);
    uint8_t idx[kHeadDim];
    auto slot = [&](int32_t j) {
      return static_cast<int64_t>(table[j / kBlock]) * kBlock + j % kBlock;
    };
    auto run = [&](const char* name, auto&& body) {
      std::vector<double> samples;
      for (int r = 0; r <= repeats; ++r) {
        const auto t0 = Clock::now();
        for (int32_t h = 0; h < kKvHeads; ++h) {
          for (int32_t j = 0; j < ctx; ++j) body(h, j);
        }
        const double s = Seconds(t0, Clock::now());
        if (r > 0) samples.push_back(s);  // first pass warms the caches
      }
      const double med = Median(samples);
      std::printf("| %s | %s | %.1f | %.2f |\n", std::string(k::KvDtypeName(c.dtype)).c_str(), name,
                  med * 1e9 / static_cast<double>(records), med * 1e3);
    };
    auto decode_key = [&](int32_t h, int32_t j) {
      const k::KvRecordAddress a = k::RecordAddress(l, krec, slot(j), h);
      cpu::DecodeRecord(kpool + a.code_offset, kpool + a.param_offset, l, codec, cpu::KvSide::kKey,
                        h, head.data());
    };
    auto decode_value = [&](int32_t h, int32_t j) {
      const k::KvRecordAddress a = k::RecordAddress(l, vrec, slot(j), h);
      cpu::DecodeRecord(vpool + a.code_offset, vpool + a.param_offset, l, codec,
                        cpu::KvSide::kValue, h, head.data());
    };
    auto rope = [&](int32_t j) {  // same loop as cpu_attention.cc's RopeKey
      const int32_t half = kHeadDim / 2;
      const float* cs = codec->rope_cos + static_cast<size_t>(j) * half;
      const float* sn = codec->rope_sin + static_cast<size_t>(j) * half;
      for (int32_t i = 0; i < half; ++i) {
        const float x1 = head[i], x2 = head[i + half];
        head[i] = x1 * cs[i] - x2 * sn[i];
        head[i + half] = x2 * cs[i] + x1 * sn[i];
      }
    };
    auto dots = [&](int32_t h) {
      for (int32_t g = 0; g < group; ++g)
        sink +=
            cpu::isa_baseline::Dot(q.data() + (h * group + g) * kHeadDim, head.data(), kHeadDim);
    };
    auto axpy = [&](int32_t j) {
      const float w = 1e-4f * static_cast<float>(j & 7);
      for (int32_t g = 0; g < group; ++g) {
        float* o = out.data() + g * kHeadDim;
        for (int32_t i = 0; i < kHeadDim; ++i) o[i] += w * head[i];
      }
    };
    if (is_tq) {
      run("K: unpack 3-bit planes", [&](int32_t h, int32_t j) {
        const k::KvRecordAddress a = k::RecordAddress(l, krec, slot(j), h);
        k::UnpackPlanes(kpool + a.code_offset, kHeadDim, kbits, idx);
        sink += idx[j & (kHeadDim - 1)];
      });
      run("K: unpack + norm x centroid[idx]", [&](int32_t h, int32_t j) {
        const k::KvRecordAddress a = k::RecordAddress(l, krec, slot(j), h);
        k::UnpackPlanes(kpool + a.code_offset, kHeadDim, kbits, idx);
        const float norm = 1.0f + 1e-3f * static_cast<float>(j & 3);
        for (int32_t i = 0; i < kHeadDim; ++i) head[i] = norm * codec->k_centroids[idx[i]];
        sink += head[j & (kHeadDim - 1)];
      });
      run("K: inverse WHT alone (Rotation::Inverse)", [&](int32_t, int32_t j) {
        codec->rotation->Inverse(head.data(), head.data());
        head[j & (kHeadDim - 1)] *= 0.5f;  // keep the values bounded and the loop live
      });
      run("K: DecodeRecord (unpack, centroids, inverse WHT, x scale + mean)", decode_key);
      run("K: DecodeRecord + RoPE from table", [&](int32_t h, int32_t j) {
        decode_key(h, j);
        rope(j);
        sink += head[0];
      });
      run("K: DecodeRecord + RoPE + 4 dots (= score pass)", [&](int32_t h, int32_t j) {
        decode_key(h, j);
        rope(j);
        dots(h);
      });
      run("V: DecodeRecord (unpack, norm x centroid)", decode_value);
      run("V: DecodeRecord + 4 axpy (= value pass)", [&](int32_t h, int32_t j) {
        decode_value(h, j);
        axpy(j);
      });
    } else {
      run("K: DecodeRecord (memcpy 512 B) + 4 dots (= score pass)", [&](int32_t h, int32_t j) {
        decode_key(h, j);
        dots(h);
      });
      run("V: DecodeRecord (memcpy) + 4 axpy (= value pass)", [&](int32_t h, int32_t j) {
        decode_value(h, j);
        axpy(j);
      });
    }
    sink += out[0];
  }
  std::printf("\n(sink %g)\n", static_cast<double>(sink));
}

}  // namespace

int main(int argc, char** argv) try {
  namespace k = tq::kernels;
  const Args args = ParseArgs(argc, argv);
  const int32_t max_ctx = *std::max_element(args.contexts.begin(), args.contexts.end());
  const int32_t blocks_per_seq = (max_ctx + kBlock - 1) / kBlock;
  const int32_t num_blocks = blocks_per_seq * args.seqs;
  const tq::ModelConfig config = BenchConfig(max_ctx);
  if (args.query_rows > *std::min_element(args.contexts.begin(), args.contexts.end())) {
    throw std::invalid_argument("--query-rows above the smallest context");
  }

  std::printf("# tq_bench_kv_attention\n\n");
  std::printf("cpu: %s; hardware threads %u\n", tq::bench::CpuModel().c_str(),
              std::thread::hardware_concurrency());
  std::printf("loadavg at start: %s\n", LoadAvg().c_str());
  std::printf(
      "shape: head_dim %d, %d KV heads, %d query heads (GQA %d), block_size %d, "
      "%d sequence(s), %d query token(s) each; rope_theta %.0f\n",
      kHeadDim, kKvHeads, kHeads, kHeads / kKvHeads, kBlock, args.seqs, args.query_rows,
      config.rope_theta);
  std::printf(
      "repeats %d (median; one unmeasured warm-up pass), %s caches before each call, %s time\n",
      args.repeats, args.cold ? "cold (64 MiB read)" : "warm",
      args.cpu_clock ? "process CPU" : "wall");

  // Block tables: a shuffled permutation of the pool, one row per sequence.
  std::mt19937_64 rng(1234);
  std::vector<int32_t> tables(num_blocks);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);

  // Random K/V for max_ctx positions (the same for every sequence and dtype).
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uni(0.5f, 2.0f);
  const size_t row = static_cast<size_t>(kKvHeads) * kHeadDim;
  std::vector<float> mean(row), scale(row);
  for (float& m : mean) m = 0.5f * normal(rng);
  for (float& s : scale) s = uni(rng);
  std::vector<float> kdata(static_cast<size_t>(max_ctx) * row), vdata(kdata.size());
  for (size_t i = 0; i < kdata.size(); ++i) kdata[i] = mean[i % row] + scale[i % row] * normal(rng);
  for (float& e : vdata) e = normal(rng);

  // One backend per thread count; the caches live in the first one's memory
  // (the CPU backend's memory is plain host memory, usable by all).
  std::vector<std::unique_ptr<k::Backend>> backends;
  for (int32_t t : args.threads) backends.push_back(k::CreateCpuBackend(t));
  k::Backend* alloc = backends[0].get();

  std::vector<Case> cases;
  for (KvDtype dtype : args.dtypes) {
    Case c;
    c.dtype = dtype;
    if (k::KvStoresPreRopeKeys(dtype)) {
      c.tq = std::make_shared<tq::TqCodecState>(config, dtype, config.max_position_embeddings, mean,
                                                scale);
    }
    const k::KvLayout layout{dtype, num_blocks, kBlock, kKvHeads, kHeadDim};
    c.cache = std::make_unique<tq::PagedKvCache>(alloc, 1, layout, c.tq);
    c.bytes_per_token = layout.TokenBytes() + layout.VBlockBytes() / kBlock;
    const k::KvLayerView view = c.cache->Layer(0);
    const int32_t chunk = 256;
    std::vector<int32_t> slots(chunk);
    const auto t0 = Clock::now();
    for (int32_t s = 0; s < args.seqs; ++s) {
      const int32_t* table = tables.data() + static_cast<size_t>(s) * blocks_per_seq;
      for (int32_t j0 = 0; j0 < max_ctx; j0 += chunk) {
        const int32_t n = std::min(chunk, max_ctx - j0);
        for (int32_t j = 0; j < n; ++j)
          slots[j] = table[(j0 + j) / kBlock] * kBlock + (j0 + j) % kBlock;
        alloc->KvWrite({kdata.data() + j0 * row, vdata.data() + j0 * row, slots.data(), n, view});
      }
    }
    c.fill_s = Seconds(t0, Clock::now());
    cases.push_back(std::move(c));
  }

  // Decode-style quantize-on-write: KvWrite of one token per call (all KV
  // heads, K and V), rewriting the first write_tokens positions of sequence 0
  // with the same data; interleaved across dtypes per repeat.
  const int32_t wtok = std::min(args.write_tokens, max_ctx);
  std::vector<std::vector<double>> write_samples(cases.size());
  for (int r = 0; r <= args.repeats; ++r) {
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const k::KvLayerView view = cases[ci].cache->Layer(0);
      const auto t0 = Clock::now();
      for (int32_t j = 0; j < wtok; ++j) {
        const int32_t slot = tables[j / kBlock] * kBlock + j % kBlock;
        alloc->KvWrite({kdata.data() + j * row, vdata.data() + j * row, &slot, 1, view});
      }
      if (r > 0) write_samples[ci].push_back(Seconds(t0, Clock::now()) / wtok);
    }
  }

  // Attention: for every context and thread count, dtypes interleaved.
  const int32_t rows = args.query_rows;
  const int32_t num_tokens = args.seqs * rows;
  std::vector<float> q(static_cast<size_t>(num_tokens) * kHeads * kHeadDim);
  for (float& e : q) e = normal(rng);
  std::vector<float> out(q.size());
  std::vector<int32_t> token_seq(num_tokens), token_pos(num_tokens);
  for (int32_t t = 0; t < num_tokens; ++t) token_seq[t] = t / rows;
  CacheFlusher flusher(size_t{64} << 20);
  const size_t nt = args.threads.size(), nd = cases.size(), nc = args.contexts.size();
  std::vector<std::vector<double>> samples(nc * nt * nd);
  std::vector<uint64_t> checksums(nc * nt * nd);  // of the last repeat's output bits
  auto sample_index = [&](size_t c, size_t t, size_t d) { return (c * nt + t) * nd + d; };
  for (int r = 0; r <= args.repeats; ++r) {
    for (size_t ci = 0; ci < nc; ++ci) {
      for (int32_t t = 0; t < num_tokens; ++t) token_pos[t] = args.contexts[ci] - rows + t % rows;
      for (size_t ti = 0; ti < nt; ++ti) {
        for (size_t k0 = 0; k0 < nd; ++k0) {
          const size_t di = (k0 + static_cast<size_t>(r)) % nd;  // rotate the order too
          k::PagedAttentionParams p;
          p.q = q.data();
          p.out = out.data();
          p.token_seq = token_seq.data();
          p.token_pos = token_pos.data();
          p.block_tables = tables.data();
          p.num_tokens = num_tokens;
          p.num_heads = kHeads;
          p.max_blocks_per_seq = blocks_per_seq;
          p.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
          p.cache = cases[di].cache->Layer(0);
          if (args.cold) flusher.Flush();
          const double c0 = args.cpu_clock ? ProcessCpuSeconds() : 0.0;
          const auto t0 = Clock::now();
          backends[ti]->PagedAttention(p);
          const double s = args.cpu_clock ? ProcessCpuSeconds() - c0 : Seconds(t0, Clock::now());
          if (r > 0) samples[sample_index(ci, ti, di)].push_back(s);
          // FNV-1a of the output's bits: equal outputs of two builds (a kernel
          // change that must not move any bit) give equal hashes.
          checksums[sample_index(ci, ti, di)] = tq::Fnv1a(out.data(), out.size() * sizeof(float));
        }
      }
    }
    if (r > 0) {
      std::printf("repeat %d done, loadavg %s\n", r, LoadAvg().c_str());
      std::fflush(stdout);
    }
  }

  std::printf("\n## Quantize-on-write (KvWrite, 1 token per call, 8 KV heads, K+V, 1 thread)\n\n");
  std::printf(
      "| dtype | µs per token | tokens/s | bulk fill tokens/s (%d tok x %d seq, "
      "chunks of 256) | KV bytes per token |\n|---|---:|---:|---:|---:|\n",
      max_ctx, args.seqs);
  for (size_t di = 0; di < nd; ++di) {
    const double per_tok = Median(write_samples[di]);
    std::printf("| %s | %.2f | %.0f | %.0f | %zu |\n",
                std::string(k::KvDtypeName(cases[di].dtype)).c_str(), per_tok * 1e6, 1.0 / per_tok,
                static_cast<double>(max_ctx) * args.seqs / cases[di].fill_s,
                cases[di].bytes_per_token);
  }

  std::printf("\n## %s attention (PagedAttention, %d sequence(s) x %d query row(s))\n\n",
              rows > 1 ? "Prefill" : "Decode", args.seqs, rows);
  std::printf(
      "| context | threads | dtype | µs per call | ratio to fp32 | KV bytes read per call "
      "| effective GB/s | output FNV-1a |\n|---:|---:|---|---:|---:|---:|---:|---|\n");
  for (size_t ci = 0; ci < nc; ++ci) {
    for (size_t ti = 0; ti < nt; ++ti) {
      double fp32 = 0.0;
      for (size_t di = 0; di < nd; ++di)
        if (cases[di].dtype == KvDtype::kF32) fp32 = Median(samples[sample_index(ci, ti, di)]);
      for (size_t di = 0; di < nd; ++di) {
        const double med = Median(samples[sample_index(ci, ti, di)]);
        const double bytes =
            static_cast<double>(cases[di].bytes_per_token) * args.contexts[ci] * args.seqs;
        char ratio[32] = "-";
        if (fp32 > 0.0) std::snprintf(ratio, sizeof(ratio), "%.2f", med / fp32);
        std::printf("| %d | %d | %s | %.0f | %s | %.1f MiB | %.1f | %016llx |\n", args.contexts[ci],
                    args.threads[ti], std::string(k::KvDtypeName(cases[di].dtype)).c_str(),
                    med * 1e6, ratio, bytes / (1 << 20), bytes / med * 1e-9,
                    static_cast<unsigned long long>(checksums[sample_index(ci, ti, di)]));
      }
    }
  }
  std::printf("\nloadavg at end: %s (flush sink %llu)\n", LoadAvg().c_str(),
              static_cast<unsigned long long>(flusher.sink()));

  if (args.breakdown) {
    const int32_t bctx = std::min(max_ctx, 4096);
    Breakdown(cases, tables, bctx, std::max(3, args.repeats / 2));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
