// The NCCL communicator on this process's GPUs: every collective with world
// sizes 1..device count (world 1 = the TP=1 path through NCCL), expected values
// computed in the test from NCCL's definitions. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "engine/parallel/nccl_communicator.h"
#include "kernels/half.h"

namespace tq {
namespace {

int Devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n;
}

// Device buffer of the calling thread's current device.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 1), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  void* ptr = nullptr;
};

template <typename Fn>
void OnRanks(int world, Fn fn) {
  std::vector<int> devices;
  for (int d = 0; d < world; ++d) devices.push_back(d);
  auto comms = CreateNcclCommunicators(devices);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      fn(r, *comms[r]);
    });
  }
  for (auto& t : threads) t.join();
}

float Value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 0.25 * (i % 7) - 1.0);
}

TEST(NcclCommunicator, AllReduceAllGatherBroadcast) {
  const int n = Devices();
  if (n == 0) GTEST_SKIP() << "no CUDA device";
  std::printf("NCCL %d, %d device(s)\n", NcclVersion(), n);
  for (int world = 1; world <= n; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    const size_t count = 1027;
    OnRanks(world, [&](int r, Communicator& c) {
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.world_size(), world);
      // fp32 all-reduce.
      std::vector<float> host(count);
      for (size_t i = 0; i < count; ++i) host[i] = Value(r, i);
      DeviceBuffer buf(count * sizeof(float));
      cudaMemcpy(buf.ptr, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      c.AllReduceSum(buf.ptr, count, CommDtype::kF32);
      cudaMemcpy(host.data(), buf.ptr, count * sizeof(float), cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int q = 0; q < world; ++q) want += Value(q, i);
        ASSERT_EQ(host[i], static_cast<float>(want)) << i;  // small exact values
      }
      // fp16 and bf16 all-reduce of exactly representable values.
      for (CommDtype t : {CommDtype::kF16, CommDtype::kBF16}) {
        std::vector<uint16_t> h(count);
        for (size_t i = 0; i < count; ++i) {
          h[i] = t == CommDtype::kF16 ? kernels::FloatToHalf(Value(r, i))
                                      : kernels::FloatToBf16(Value(r, i));
        }
        DeviceBuffer hb(count * 2);
        cudaMemcpy(hb.ptr, h.data(), count * 2, cudaMemcpyHostToDevice);
        c.AllReduceSum(hb.ptr, count, t);
        cudaMemcpy(h.data(), hb.ptr, count * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < count; ++i) {
          double want = 0;
          for (int q = 0; q < world; ++q) want += Value(q, i);
          const float got =
              t == CommDtype::kF16 ? kernels::HalfToFloat(h[i]) : kernels::Bf16ToFloat(h[i]);
          ASSERT_EQ(got, static_cast<float>(want)) << CommDtypeName(t) << " " << i;
        }
      }
      // All-gather: rank q's values at [q * count, (q + 1) * count).
      for (size_t i = 0; i < count; ++i) host[i] = Value(r, i);
      DeviceBuffer send(count * sizeof(float)), recv(world * count * sizeof(float));
      cudaMemcpy(send.ptr, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      c.AllGather(send.ptr, recv.ptr, count, CommDtype::kF32);
      std::vector<float> all(world * count);
      cudaMemcpy(all.data(), recv.ptr, all.size() * sizeof(float), cudaMemcpyDeviceToHost);
      for (int q = 0; q < world; ++q) {
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(all[q * count + i], Value(q, i));
      }
      // Broadcast from the last rank.
      c.Broadcast(send.ptr, count, CommDtype::kF32, world - 1);
      cudaMemcpy(host.data(), send.ptr, count * sizeof(float), cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(host[i], Value(world - 1, i));
    });
  }
}

}  // namespace
}  // namespace tq
