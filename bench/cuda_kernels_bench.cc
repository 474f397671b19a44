// CUDA kernel benchmarks (issue 6 targets), printed as one table:
//  1. device-to-device copy bandwidth (cudaMemcpyAsync, read + write bytes);
//  2. decode paged attention, batch 32, head_dim 128, 8 KV / 32 query heads,
//     contexts 4k and 16k, KV fp16 / int8 / tq3: bytes of K/V records read
//     per second against the copy bandwidth, and tq3's speed-up over fp16;
//  3. chunked-prefill attention: one sequence, a 2048-token chunk over a 2k
//     and an 8k context, fp16 / tq3, the query-tiled prefill kernel against
//     the per-token path (PagedAttentionParams::host_token_seq left null);
//  4. one decode step (batch 1, 1024-token context) of a random
//     Llama-3-8B-shape model with bf16 weights and a tq3 KV cache, against
//     the weight-bandwidth roofline (weight bytes / copy bandwidth);
//  5. LogitsTopK at vocab 128256 (rows 1/32/256, k 64/1024) against the
//     device-to-host copy of the full logits that host sampling needs.
// Timing: cudaEvents on the backend's stream, warm-up, median of many runs.
// Usage: tq_bench_cuda [--quick]  (quick: fewer repetitions, 4k / 2k contexts only)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/lloyd_max.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#include "kernels/kv_layout.h"
#include "kernels/tq/rotation.h"
#include "tests/cuda/tq_codec_parts.h"

namespace tq::bench {
void FillUniform(float* dst, int64_t n, uint32_t seed, float lo, float hi, cudaStream_t stream);
}  // namespace tq::bench

namespace {

using tq::kernels::Backend;
using tq::kernels::BackendBuffer;
using tq::kernels::KvDtype;

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "tq_bench_cuda: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

// Median milliseconds of `iters` runs of f on `stream` after `warmup` runs.
double MedianMs(cudaStream_t stream, int warmup, int iters, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    Check(cudaEventRecord(start, stream), "record");
    f();
    Check(cudaEventRecord(stop, stream), "record");
    Check(cudaEventSynchronize(stop), "sync");
    float t = 0.0f;
    Check(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Bench {
  Backend* backend;
  cudaStream_t stream;
  int iters;

  BackendBuffer Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    BackendBuffer b(backend, n * sizeof(float));
    tq::bench::FillUniform(b.as<float>(), static_cast<int64_t>(n), seed, lo, hi, stream);
    return b;
  }
  template <typename T>
  BackendBuffer Upload(const std::vector<T>& v) {
    BackendBuffer b(backend, v.size() * sizeof(T));
    backend->CopyToDevice(b.data(), v.data(), v.size() * sizeof(T));
    return b;
  }
};

// The tq codec for head_dim d (no key normalization: timing does not depend
// on the statistics; RoPE theta 500000 as Llama 3).
struct TqCodec : tq::cudatest::TqCodecParts {
  TqCodec(KvDtype dtype, int32_t d, int32_t positions)
      : TqCodecParts(dtype, d, positions, 0x7451515120260ull, 500000.0) {}
};

double CopyBandwidth(Bench& b) {
  const size_t bytes = size_t{1} << 30;
  BackendBuffer src(b.backend, bytes), dst(b.backend, bytes);
  const double ms = MedianMs(b.stream, 3, b.iters, [&] {
    Check(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, b.stream),
          "copy");
  });
  return 2.0 * bytes / (ms * 1e-3);  // read + write
}

// A paged KV pool of `seqs` sequences × `ctx` positions (head_dim 128, 8 KV
// heads, block size 16, shuffled block tables), every position written
// through KvWrite, and attention params over it for 32 query heads.
struct AttentionSetup {
  static constexpr int32_t kKvHeads = 8, kHeads = 32, kHd = 128, kBs = 16;
  AttentionSetup(Bench& b, KvDtype dtype, int32_t seqs, int32_t ctx)
      : layout{dtype, seqs * ctx / kBs, kBs, kKvHeads, kHd},
        kpool(b.backend, layout.BlockBytes() * layout.num_blocks),
        vpool(b.backend, layout.VBlockBytes() * layout.num_blocks) {
    if (tq::kernels::KvStoresPreRopeKeys(dtype)) tq = std::make_unique<TqCodec>(dtype, kHd, ctx);
    view = {kpool.data(), vpool.data(), layout, tq ? &tq->codec : nullptr,
            tq ? tq->UploadTo(b.backend, layout) : nullptr};
    std::vector<int32_t> blocks(layout.num_blocks);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));
    per_seq = ctx / kBs;
    tables = b.Upload(blocks);
    const int32_t chunk = 65536;  // tokens per KvWrite call
    for (int32_t t0 = 0; t0 < seqs * ctx; t0 += chunk) {
      const int32_t n = std::min(chunk, seqs * ctx - t0);
      std::vector<int32_t> slots(n);
      for (int32_t i = 0; i < n; ++i) {
        const int32_t s = (t0 + i) / ctx, j = (t0 + i) % ctx;
        slots[i] = blocks[static_cast<size_t>(s) * per_seq + j / kBs] * kBs + j % kBs;
      }
      BackendBuffer k = b.Random(static_cast<size_t>(n) * kKvHeads * kHd, 1 + t0);
      BackendBuffer v = b.Random(static_cast<size_t>(n) * kKvHeads * kHd, 2 + t0);
      BackendBuffer dslots = b.Upload(slots);
      b.backend->KvWrite({k.as<float>(), v.as<float>(), dslots.as<int32_t>(), n, view, nullptr});
    }
  }
  // Params for query tokens (token_seq, token_pos), host copies kept here.
  tq::kernels::PagedAttentionParams Params(Bench& b, std::vector<int32_t> token_seq,
                                           const std::vector<int32_t>& token_pos) {
    seq = std::move(token_seq);
    const int32_t n = static_cast<int32_t>(seq.size());
    dseq = b.Upload(seq);
    dpos = b.Upload(token_pos);
    q = b.Random(static_cast<size_t>(n) * kHeads * kHd, 3);
    out = BackendBuffer(b.backend, static_cast<size_t>(n) * kHeads * kHd * sizeof(float));
    tq::kernels::PagedAttentionParams p;
    p.q = q.as<float>();
    p.out = out.as<float>();
    p.token_seq = dseq.as<int32_t>();
    p.token_pos = dpos.as<int32_t>();
    p.host_token_seq = seq.data();
    p.block_tables = tables.as<int32_t>();
    p.num_tokens = n;
    p.num_heads = kHeads;
    p.max_blocks_per_seq = per_seq;
    p.scale = 1.0f / std::sqrt(static_cast<float>(kHd));
    p.cache = view;
    return p;
  }
  double RecordBytes() const { return layout.KRecord().bytes() + layout.VRecord().bytes(); }

  tq::kernels::KvLayout layout;
  BackendBuffer kpool, vpool, tables, dseq, dpos, q, out;
  std::unique_ptr<TqCodec> tq;
  tq::kernels::KvLayerView view;
  int32_t per_seq = 0;
  std::vector<int32_t> seq;
};

// Decode attention, batch 32: returns milliseconds; *bytes = K/V record bytes read.
double DecodeAttention(Bench& b, KvDtype dtype, int32_t ctx, double* bytes) {
  constexpr int32_t kBatch = 32;
  AttentionSetup setup(b, dtype, kBatch, ctx);
  std::vector<int32_t> seq(kBatch), pos(kBatch, ctx - 1);
  std::iota(seq.begin(), seq.end(), 0);
  const tq::kernels::PagedAttentionParams p = setup.Params(b, seq, pos);
  *bytes = static_cast<double>(kBatch) * ctx * AttentionSetup::kKvHeads * setup.RecordBytes();
  return MedianMs(b.stream, 3, b.iters, [&] { b.backend->PagedAttention(p); });
}

// Chunked-prefill attention: one sequence, the last `chunk` positions of a
// `ctx`-position context as query tokens. tiled: with the host copy of
// token_seq (the query-tiled prefill kernel); else without it (every token
// through the per-token decode kernel, the path before the prefill kernel).
double PrefillAttention(Bench& b, KvDtype dtype, int32_t chunk, int32_t ctx, bool tiled) {
  AttentionSetup setup(b, dtype, 1, ctx);
  std::vector<int32_t> pos(chunk);
  std::iota(pos.begin(), pos.end(), ctx - chunk);
  tq::kernels::PagedAttentionParams p = setup.Params(b, std::vector<int32_t>(chunk, 0), pos);
  if (!tiled) p.host_token_seq = nullptr;
  return MedianMs(b.stream, 2, std::max(3, b.iters / 6), [&] { b.backend->PagedAttention(p); });
}

// One decode step of a Llama-3-8B-shape model, batch 1 at position ctx - 1.
double DecodeStep(Bench& b, int32_t ctx, double* weight_bytes) {
  constexpr int32_t kHidden = 4096, kInter = 14336, kLayers = 32, kHeads = 32, kKv = 8, kHd = 128,
                    kVocab = 128256, kBs = 16;
  using tq::kernels::WeightDtype;
  auto weight = [&](int32_t out, int32_t in) {
    BackendBuffer w(b.backend, static_cast<size_t>(out) * in * 2);
    // 0x3c3c as bf16 ≈ 0.0115: any finite value times the same bytes.
    Check(cudaMemsetAsync(w.data(), 0x3c, w.bytes(), b.stream), "memset");
    return w;
  };
  struct Layer {
    BackendBuffer q, k, v, o, gate, up, down, norm1, norm2, kpool, vpool;
  };
  std::vector<Layer> layers(kLayers);
  tq::kernels::KvLayout l{KvDtype::kTq3, ctx / kBs, kBs, kKv, kHd};
  TqCodec tq(KvDtype::kTq3, kHd, ctx);
  *weight_bytes = 0;
  for (Layer& L : layers) {
    L.q = weight(kHeads * kHd, kHidden);
    L.k = weight(kKv * kHd, kHidden);
    L.v = weight(kKv * kHd, kHidden);
    L.o = weight(kHidden, kHeads * kHd);
    L.gate = weight(kInter, kHidden);
    L.up = weight(kInter, kHidden);
    L.down = weight(kHidden, kInter);
    L.norm1 = b.Random(kHidden, 5, 0.9f, 1.1f);
    L.norm2 = b.Random(kHidden, 6, 0.9f, 1.1f);
    L.kpool = BackendBuffer(b.backend, l.BlockBytes() * l.num_blocks);
    L.vpool = BackendBuffer(b.backend, l.VBlockBytes() * l.num_blocks);
    *weight_bytes += 2.0 * (static_cast<double>(kHeads + 2 * kKv) * kHd * kHidden +
                            static_cast<double>(kHidden) * kHeads * kHd +
                            3.0 * static_cast<double>(kInter) * kHidden);
  }
  BackendBuffer lm_head = weight(kVocab, kHidden);
  BackendBuffer final_norm = b.Random(kHidden, 7, 0.9f, 1.1f);
  *weight_bytes += 2.0 * static_cast<double>(kVocab) * kHidden;
  std::vector<int32_t> table(l.num_blocks);
  std::iota(table.begin(), table.end(), 0);
  BackendBuffer dtable = b.Upload(table);
  const std::vector<int32_t> pos{ctx - 1}, seq{0}, slot{ctx - 1};
  BackendBuffer dpos = b.Upload(pos), dseq = b.Upload(seq), dslot = b.Upload(slot);
  const tq::kernels::TqCodecArrays* tq_arrays = tq.UploadTo(b.backend, l);
  // Fill every cache position once (the step then reads ctx positions).
  {
    std::vector<int32_t> all(ctx);
    std::iota(all.begin(), all.end(), 0);
    BackendBuffer dall = b.Upload(all);
    BackendBuffer k = b.Random(static_cast<size_t>(ctx) * kKv * kHd, 8);
    BackendBuffer v = b.Random(static_cast<size_t>(ctx) * kKv * kHd, 9);
    for (Layer& L : layers) {
      tq::kernels::KvLayerView view{L.kpool.data(), L.vpool.data(), l, &tq.codec, tq_arrays};
      b.backend->KvWrite({k.as<float>(), v.as<float>(), dall.as<int32_t>(), ctx, view, nullptr});
    }
  }
  std::vector<float> inv_freq(kHd / 2);
  for (int32_t i = 0; i < kHd / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / kHd);
  BackendBuffer dfreq = b.Upload(inv_freq);
  BackendBuffer hidden = b.Random(kHidden, 10), normed(b.backend, kHidden * 4),
                q(b.backend, kHeads * kHd * 4), k(b.backend, kKv * kHd * 4),
                v(b.backend, kKv * kHd * 4), attn(b.backend, kHeads * kHd * 4),
                gate(b.backend, kInter * 4), up(b.backend, kInter * 4),
                logits(b.backend, static_cast<size_t>(kVocab) * 4);
  auto mm = [&](const BackendBuffer& x, const BackendBuffer& w, int32_t out, int32_t in,
                BackendBuffer& y, bool acc) {
    b.backend->MatMul(
        {x.as<float>(), {w.data(), WeightDtype::kBF16, out, in}, y.as<float>(), 1, acc});
  };
  auto step = [&] {
    for (Layer& L : layers) {
      b.backend->RmsNorm({hidden.as<float>(), L.norm1.as<float>(), normed.as<float>(), 1, kHidden});
      mm(normed, L.q, kHeads * kHd, kHidden, q, false);
      mm(normed, L.k, kKv * kHd, kHidden, k, false);
      mm(normed, L.v, kKv * kHd, kHidden, v, false);
      b.backend->Rope({q.as<float>(), dpos.as<int32_t>(), dfreq.as<float>(), 1, kHeads, kHd});
      tq::kernels::KvLayerView view{L.kpool.data(), L.vpool.data(), l, &tq.codec, tq_arrays};
      b.backend->KvWrite({k.as<float>(), v.as<float>(), dslot.as<int32_t>(), 1, view, nullptr});
      tq::kernels::PagedAttentionParams p;
      p.q = q.as<float>();
      p.out = attn.as<float>();
      p.token_seq = dseq.as<int32_t>();
      p.token_pos = dpos.as<int32_t>();
      p.block_tables = dtable.as<int32_t>();
      p.num_tokens = 1;
      p.num_heads = kHeads;
      p.max_blocks_per_seq = l.num_blocks;
      p.scale = 1.0f / std::sqrt(static_cast<float>(kHd));
      p.cache = view;
      b.backend->PagedAttention(p);
      mm(attn, L.o, kHidden, kHeads * kHd, hidden, true);
      b.backend->RmsNorm({hidden.as<float>(), L.norm2.as<float>(), normed.as<float>(), 1, kHidden});
      mm(normed, L.gate, kInter, kHidden, gate, false);
      mm(normed, L.up, kInter, kHidden, up, false);
      b.backend->SiluMul({gate.as<float>(), up.as<float>(), gate.as<float>(), 1, kInter});
      mm(gate, L.down, kHidden, kInter, hidden, true);
    }
    b.backend->RmsNorm(
        {hidden.as<float>(), final_norm.as<float>(), normed.as<float>(), 1, kHidden});
    mm(normed, lm_head, kVocab, kHidden, logits, false);
  };
  return MedianMs(b.stream, 2, std::max(5, b.iters / 2), step);
}

// Sampling summary at Llama 3's vocabulary: LogitsTopK on [rows, 128256]
// logits (plus the copy of its small outputs to the host) against copying
// the full logits to pinned host memory, what host sampling needs.
void LogitsTopKBench(Bench& b) {
  constexpr int32_t kVocab = 128256;
  for (const int32_t rows : {1, 32, 256}) {
    const size_t n = static_cast<size_t>(rows) * kVocab;
    BackendBuffer logits = b.Random(n, 91, -10.0f, 10.0f);
    BackendBuffer inv_t = b.Upload(std::vector<float>(static_cast<size_t>(rows), 1.0f));
    float* host = nullptr;
    Check(cudaMallocHost(&host, n * sizeof(float)), "pinned host");
    const double copy_ms = MedianMs(b.stream, 3, b.iters, [&] {
      Check(
          cudaMemcpyAsync(host, logits.data(), n * sizeof(float), cudaMemcpyDeviceToHost, b.stream),
          "d2h");
    });
    char name[96];
    std::snprintf(name, sizeof(name), "logits d2h r%d v%d: ms", rows, kVocab);
    std::printf("%-44s %12.3f\n", name, copy_ms);
    for (const int32_t k : {64, 1024}) {
      const size_t out = static_cast<size_t>(rows) * k;
      BackendBuffer ids(b.backend, out * sizeof(int32_t)), values(b.backend, out * sizeof(float));
      BackendBuffer sums(b.backend, 2 * static_cast<size_t>(rows) * sizeof(double));
      tq::kernels::LogitsTopKParams p;
      p.logits = logits.as<float>();
      p.inv_temperature = inv_t.as<float>();
      p.ids = ids.as<int32_t>();
      p.values = values.as<float>();
      p.sum_exp = sums.as<double>();
      p.sum_exp_scaled = sums.as<double>() + rows;
      p.rows = rows;
      p.vocab = kVocab;
      p.k = k;
      const double topk_ms = MedianMs(b.stream, 3, b.iters, [&] { b.backend->LogitsTopK(p); });
      // Kernel + its outputs to the (pinned) host, as the runner uses them.
      const double with_copy_ms = MedianMs(b.stream, 3, b.iters, [&] {
        b.backend->LogitsTopK(p);
        Check(cudaMemcpyAsync(host, ids.data(), out * sizeof(int32_t), cudaMemcpyDeviceToHost,
                              b.stream),
              "d2h ids");
        Check(cudaMemcpyAsync(host + out, values.data(), out * sizeof(float),
                              cudaMemcpyDeviceToHost, b.stream),
              "d2h values");
      });
      std::snprintf(name, sizeof(name), "logits top-k r%d k%d: ms (+d2h), x d2h", rows, k);
      std::printf("%-44s %12.3f (%.3f) %6.1fx\n", name, topk_ms, with_copy_ms,
                  copy_ms / with_copy_ms);
    }
    cudaFreeHost(host);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::string why;
  if (tq::kernels::cuda::DeviceCount(&why) == 0) {
    std::printf("tq_bench_cuda: no CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  std::unique_ptr<Backend> backend = tq::kernels::CreateCudaBackend(0);
  Bench b{backend.get(), static_cast<cudaStream_t>(tq::kernels::CudaBackendStream(*backend)),
          quick ? 10 : 30};
  std::printf("device: %s\n", tq::kernels::cuda::DeviceDescription(0).c_str());
  std::printf("%-44s %12s %12s\n", "benchmark", "value", "vs copy BW");
  const double copy = CopyBandwidth(b);
  std::printf("%-44s %9.1f GB/s %12s\n", "d2d copy bandwidth (read+write)", copy / 1e9, "1.00");
  std::vector<int32_t> contexts = {4096, 16384};
  if (quick) contexts = {4096};
  for (const int32_t ctx : contexts) {
    double fp16_ms = 0.0;
    for (const KvDtype dtype : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kTq3}) {
      double bytes = 0.0;
      const double ms = DecodeAttention(b, dtype, ctx, &bytes);
      if (dtype == KvDtype::kF16) fp16_ms = ms;
      char name[96];
      std::snprintf(name, sizeof(name), "decode attn b32 ctx %d %s: ms", ctx,
                    std::string(tq::kernels::KvDtypeName(dtype)).c_str());
      std::printf("%-44s %12.3f %12.2f\n", name, ms, bytes / (ms * 1e-3) / copy);
      if (dtype == KvDtype::kTq3) {
        std::snprintf(name, sizeof(name), "decode attn ctx %d tq3 speed-up over fp16", ctx);
        std::printf("%-44s %11.2fx\n", name, fp16_ms / ms);
      }
    }
  }
  std::vector<int32_t> prefill_contexts = {2048, 8192};
  if (quick) prefill_contexts = {2048};
  for (const int32_t ctx : prefill_contexts) {
    for (const KvDtype dtype : {KvDtype::kF16, KvDtype::kTq3}) {
      const std::string dt(tq::kernels::KvDtypeName(dtype));
      const double per_token = PrefillAttention(b, dtype, 2048, ctx, false);
      const double tiled = PrefillAttention(b, dtype, 2048, ctx, true);
      char name[96];
      std::snprintf(name, sizeof(name), "prefill attn 2k chunk ctx %d %s per-token: ms", ctx,
                    dt.c_str());
      std::printf("%-44s %12.3f\n", name, per_token);
      std::snprintf(name, sizeof(name), "prefill attn 2k chunk ctx %d %s tiled: ms", ctx,
                    dt.c_str());
      std::printf("%-44s %12.3f\n", name, tiled);
      std::snprintf(name, sizeof(name), "prefill attn ctx %d %s tiled speed-up", ctx, dt.c_str());
      std::printf("%-44s %11.2fx\n", name, per_token / tiled);
    }
  }
  LogitsTopKBench(b);
  double weight_bytes = 0.0;
  const double step_ms = DecodeStep(b, 1024, &weight_bytes);
  // The copy's rate counts read + write bytes: what DRAM sustains in total.
  const double roofline_ms = weight_bytes / copy * 1e3;
  std::printf("%-44s %12.3f %12.2f\n", "llama3-8b bf16 tq3 decode step b1 ctx 1024: ms", step_ms,
              roofline_ms / step_ms);
  std::printf("(decode step roofline: %.2f GB of weights at the copy bandwidth = %.3f ms)\n",
              weight_bytes / 1e9, roofline_ms);
  return 0;
}
