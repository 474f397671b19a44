// Backend selection (--device) and the host-side params checks the CUDA
// backend runs before every launch (kernels/op_checks.h): bad shapes and null
// pointers must be std::invalid_argument naming the op and the field.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "kernels/backend_factory.h"
#include "kernels/op_checks.h"

namespace tq::kernels {
namespace {

TEST(BackendFactory, ParsesDeviceNames) {
  DeviceKind kind = DeviceKind::kCpu;
  ASSERT_TRUE(ParseDeviceKind("auto", &kind));
  EXPECT_EQ(kind, DeviceKind::kAuto);
  ASSERT_TRUE(ParseDeviceKind("cuda", &kind));
  EXPECT_EQ(kind, DeviceKind::kCuda);
  ASSERT_TRUE(ParseDeviceKind("cpu", &kind));
  EXPECT_EQ(kind, DeviceKind::kCpu);
  EXPECT_FALSE(ParseDeviceKind("gpu", &kind));
  EXPECT_FALSE(ParseDeviceKind("CUDA", &kind));
}

TEST(BackendFactory, AutoSaysWhyItFallsBackToTheCpu) {
  std::string why = "stale";
  EXPECT_EQ(CreateBackend(DeviceKind::kCpu, 1, &why)->Name(), "cpu");
  EXPECT_TRUE(why.empty());
  const auto backend = CreateBackend(DeviceKind::kAuto, 1, &why);
  if (backend->Name() == "cpu") {
    EXPECT_NE(why.find("--device auto"), std::string::npos) << why;
    // Where auto finds no GPU, asking for one is an error that says so.
    try {
      CreateBackend(DeviceKind::kCuda, 1, nullptr);
      ADD_FAILURE() << "--device cuda without a GPU did not throw";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
    }
    DeviceMemoryInfo mem;
    EXPECT_FALSE(QueryDeviceMemory(*backend, &mem));
  } else {
    EXPECT_EQ(backend->Name(), "cuda");
    EXPECT_TRUE(why.empty());
  }
}

// Runs `check` and expects an invalid_argument whose message holds `needle`.
template <typename F>
void ExpectRejected(F check, const std::string& needle) {
  try {
    check();
    ADD_FAILURE() << "accepted; expected an error naming " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(OpChecks, AcceptGoodParamsAndNameTheBadField) {
  float buf[64] = {};
  int32_t ids[4] = {};
  EXPECT_NO_THROW(CheckRmsNorm("cuda", {buf, buf, buf, 2, 8, 1e-5f}));
  ExpectRejected(
      [&] {
        CheckRmsNorm("cuda", {buf, nullptr, buf, 2, 8, 1e-5f});
      },
      "cuda RmsNorm: weight is null");
  ExpectRejected([&] { CheckRmsNorm("cuda", {buf, buf, buf, -1, 8, 1e-5f}); }, "rows");
  ExpectRejected([&] { CheckRope("cuda", {buf, ids, buf, 1, 1, 7, 1.0f}); }, "head_dim");
  ExpectRejected([&] { CheckSiluMul("cuda", {buf, buf, buf, 1, 0}); }, "dim");
  ExpectRejected(
      [&] {
        CheckEmbedding("cuda", {ids, buf, buf, 1, 4, 8, WeightDtype::kInt8});
      },
      "table_dtype");
  const WeightView int4{buf, WeightDtype::kInt4, 4, 12, reinterpret_cast<uint16_t*>(buf), nullptr,
                        5};
  ExpectRejected([&] { CheckMatMul("cuda", {buf, int4, buf, 1, false}); }, "group_size");
  const WeightView dense{buf, WeightDtype::kF16, 4, 8};
  EXPECT_NO_THROW(CheckMatMul("cuda", {buf, dense, buf, 1, true}));

  KvLayerView cache{buf, buf, KvLayout{KvDtype::kF16, 4, 16, 2, 8}};
  PagedAttentionParams p;
  p.q = buf;
  p.out = buf;
  p.token_seq = ids;
  p.token_pos = ids;
  p.block_tables = ids;
  p.num_tokens = 1;
  p.num_heads = 4;
  p.max_blocks_per_seq = 1;
  p.cache = cache;
  EXPECT_NO_THROW(CheckPagedAttention("cuda", p));
  p.num_heads = 3;
  ExpectRejected([&] { CheckPagedAttention("cuda", p); }, "not a multiple of num_kv_heads 2");
  p.num_heads = 4;
  p.cache.layout.dtype = KvDtype::kTq3;  // no codec
  ExpectRejected([&] { CheckPagedAttention("cuda", p); }, "cache.tq");
  KvWriteParams w{buf, buf, ids, 1, cache, nullptr};
  EXPECT_NO_THROW(CheckKvWrite("cuda", w));
  w.cache.sink_tokens = 4;  // a sink on an fp16 cache
  w.cache.sink_k = buf;
  w.cache.sink_v = buf;
  ExpectRejected([&] { CheckKvWrite("cuda", w); }, "attention sink");
}

}  // namespace
}  // namespace tq::kernels
