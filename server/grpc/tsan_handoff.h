// gRPC reactors under ThreadSanitizer (`make test-tsan`). gRPC runs a
// reactor's callbacks on its own threads and orders them after the call that
// started them (StartWrite -> OnWriteDone, Finish -> OnDone, the reactor's
// return to gRPC -> OnCancel) through gRPC core, which Debian builds without
// TSan: TSan cannot see that ordering and reports our reactor's state (its
// mutex, its fields) as raced between gRPC's threads. These two calls state
// gRPC's documented ordering to TSan on the reactor's address; they compile to
// nothing in every other build. Thread safety is unchanged: the reactor's own
// mutex still guards its state.
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace tq::grpc_api {

/// Before handing `reactor` to gRPC (returning it, StartWrite, Finish).
inline void TsanHandToGrpc([[maybe_unused]] const void* reactor) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(reactor));
#endif
}

/// First thing in each callback gRPC makes on `reactor` (OnWriteDone, OnCancel, OnDone).
inline void TsanCalledByGrpc([[maybe_unused]] const void* reactor) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(reactor));
#endif
}

/// A gRPC callback that may be followed by OnDone on another thread
/// (OnWriteDone, OnCancel): TsanCalledByGrpc on entry, TsanHandToGrpc on
/// return, after the locks declared below it are released.
class TsanGrpcCallback {
 public:
  explicit TsanGrpcCallback(const void* reactor) : reactor_(reactor) { TsanCalledByGrpc(reactor_); }
  ~TsanGrpcCallback() { TsanHandToGrpc(reactor_); }
  TsanGrpcCallback(const TsanGrpcCallback&) = delete;
  TsanGrpcCallback& operator=(const TsanGrpcCallback&) = delete;

 private:
  const void* reactor_;
};

}  // namespace tq::grpc_api
