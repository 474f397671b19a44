// Collective communication between the ranks of a tensor-parallel group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tq {

/// Element type of a collective's buffers. Reductions of fp16/bf16 accumulate
/// in fp32 and round once, as NCCL does for its sum.
enum class CommDtype { kF32, kF16, kBF16 };

/// Bytes of one element of `dtype`.
size_t CommDtypeBytes(CommDtype dtype);
std::string_view CommDtypeName(CommDtype dtype);

/// One rank's endpoint of a group of world_size() ranks, with the semantics of
/// NCCL's collectives (ncclAllReduce with ncclSum, ncclAllGather, ncclBroadcast;
/// https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/collectives.html).
///
/// Thread ownership: each rank's Communicator is driven by that rank's thread
/// (one thread per rank); every rank must call the same collectives in the
/// same order with the same count and dtype, or the group deadlocks (as in
/// NCCL). Calls are blocking: when one returns, the rank's output buffer holds
/// the result. Buffers are memory of the rank's backend (host memory for the
/// CPU backend, device memory of the rank's GPU for NCCL).
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// In place: buf[i] = sum over ranks of buf[i], for i < count, on every rank.
  virtual void AllReduceSum(void* buf, size_t count, CommDtype dtype) = 0;
  /// recv[r * count + i] = rank r's send[i] on every rank; recv holds
  /// world_size() * count elements and must not overlap send.
  virtual void AllGather(const void* send, void* recv, size_t count, CommDtype dtype) = 0;
  /// Copies root's buf[0, count) into every rank's buf.
  virtual void Broadcast(void* buf, size_t count, CommDtype dtype, int root) = 0;

  /// Called from any thread when one rank failed (threw) in the middle of a
  /// step: ranks blocked in, or later entering, a collective of this group
  /// throw tq::Error instead of waiting forever for the failed rank. The
  /// group stays unusable until ResetAfterAbort(), which must be called once
  /// every rank has left its collective. The default does nothing (NCCL
  /// errors surface through its own return codes).
  virtual void Abort() {}
  virtual void ResetAfterAbort() {}
};

}  // namespace tq
