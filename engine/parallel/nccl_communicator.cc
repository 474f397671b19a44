#include "engine/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <string>

#include "engine/common/error.h"

namespace tq {
namespace {

void CheckNccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string(what) + ": " + ncclGetErrorString(r));
}

void CheckCuda(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(r));
}

ncclDataType_t NcclType(CommDtype t) {
  switch (t) {
    case CommDtype::kF32:
      return ncclFloat32;
    case CommDtype::kF16:
      return ncclFloat16;
    case CommDtype::kBF16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

class NcclCommunicator final : public Communicator {
 public:
  // `stream` null: the communicator creates and owns one; else it enqueues
  // on `stream` (the backend's). Either way each collective is synchronised.
  NcclCommunicator(ncclComm_t comm, int device, int rank, int world, cudaStream_t stream)
      : comm_(comm),
        stream_(stream),
        owns_stream_(stream == nullptr),
        device_(device),
        rank_(rank),
        world_(world) {
    CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
    if (owns_stream_) {
      CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    }
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (owns_stream_) cudaStreamDestroy(stream_);
    if (!aborted_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void AllReduceSum(void* buf, size_t count, CommDtype dtype) override {
    Begin();
    CheckNccl(ncclAllReduce(buf, buf, count, NcclType(dtype), ncclSum, comm_, stream_),
              "ncclAllReduce");
    Finish();
  }
  void AllGather(const void* send, void* recv, size_t count, CommDtype dtype) override {
    Begin();
    CheckNccl(ncclAllGather(send, recv, count, NcclType(dtype), comm_, stream_), "ncclAllGather");
    Finish();
  }
  void Broadcast(void* buf, size_t count, CommDtype dtype, int root) override {
    if (root < 0 || root >= world_) {
      throw Error("Broadcast: root " + std::to_string(root) + " is not a rank");
    }
    Begin();
    CheckNccl(ncclBroadcast(buf, buf, count, NcclType(dtype), root, comm_, stream_),
              "ncclBroadcast");
    Finish();
  }
  // A communicator cannot be used after ncclCommAbort; the group must be
  // created again (ResetAfterAbort cannot restore it).
  void Abort() override {
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  void Begin() {
    if (aborted_) throw Error("NCCL communicator aborted: another rank failed");
    CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
  }
  void Finish() { CheckCuda(cudaStreamSynchronize(stream_), "NCCL collective"); }

  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_;
  int device_, rank_, world_;
  std::atomic<bool> aborted_{false};  // set by Abort() from any thread
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> CreateNcclCommunicators(
    const std::vector<int>& devices) {
  return CreateNcclCommunicators(devices, std::vector<void*>(devices.size(), nullptr));
}

std::vector<std::unique_ptr<Communicator>> CreateNcclCommunicators(
    const std::vector<int>& devices, const std::vector<void*>& streams) {
  if (devices.empty()) throw Error("CreateNcclCommunicators: no devices");
  if (streams.size() != devices.size()) {
    throw Error("CreateNcclCommunicators: " + std::to_string(streams.size()) + " streams for " +
                std::to_string(devices.size()) + " devices");
  }
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size());
  CheckNccl(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> out;
  int r = 0;
  try {
    for (; r < n; ++r)
      out.push_back(std::make_unique<NcclCommunicator>(comms[r], devices[r], r, n,
                                                       static_cast<cudaStream_t>(streams[r])));
  } catch (...) {
    for (; r < n; ++r) ncclCommDestroy(comms[r]);  // not yet owned by a communicator
    throw;
  }
  return out;
}

bool NcclBuilt() {
  return true;
}

int NcclVersion() {
  int v = 0;
  CheckNccl(ncclGetVersion(&v), "ncclGetVersion");
  return v;
}

}  // namespace tq
