#include "kernels/kv_layout.h"

#include "kernels/tq/bitplanes.h"

namespace tq::kernels {

size_t KvDtypeElementBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return 4;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 2;
    default:
      return 0;
  }
}

namespace {

// The --kv-cache-dtype names; the first of each format is the one
// KvDtypeName prints.
constexpr struct {
  std::string_view name;
  KvDtype dtype;
} kKvDtypeNames[] = {
    {"fp32", KvDtype::kF32},      {"float32", KvDtype::kF32}, {"fp16", KvDtype::kF16},
    {"float16", KvDtype::kF16},   {"half", KvDtype::kF16},    {"bf16", KvDtype::kBF16},
    {"bfloat16", KvDtype::kBF16}, {"int8", KvDtype::kInt8},   {"int4", KvDtype::kInt4},
    {"tq3", KvDtype::kTq3},       {"tq4", KvDtype::kTq4},     {"tqk3v2", KvDtype::kTqK3V2}};

}  // namespace

std::string_view KvDtypeName(KvDtype dtype) {
  for (const auto& n : kKvDtypeNames) {
    if (n.dtype == dtype) return n.name;
  }
  return "?";
}

bool ParseKvDtype(std::string_view name, KvDtype* out) {
  for (const auto& n : kKvDtypeNames) {
    if (n.name == name) {
      *out = n.dtype;
      return true;
    }
  }
  return false;
}

int32_t TqKeyBits(KvDtype dtype) {
  return dtype == KvDtype::kTq3 || dtype == KvDtype::kTqK3V2 ? 3 : dtype == KvDtype::kTq4 ? 4 : 0;
}
int32_t TqValueBits(KvDtype dtype) {
  return dtype == KvDtype::kTq3 || dtype == KvDtype::kTq4 ? 3 : dtype == KvDtype::kTqK3V2 ? 2 : 0;
}

namespace {

KvRecord Record(KvDtype dtype, int32_t head_dim, int32_t tq_bits) {
  const uint32_t d = static_cast<uint32_t>(head_dim);
  switch (dtype) {
    case KvDtype::kF32:
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return {static_cast<uint32_t>(KvDtypeElementBytes(dtype)) * d, 0};
    case KvDtype::kInt8:
      return {d, 4};
    case KvDtype::kInt4:
      return {(d + 1) / 2, 4};
    case KvDtype::kTq3:
    case KvDtype::kTq4:
    case KvDtype::kTqK3V2:
      return {static_cast<uint32_t>(PlaneBytes(head_dim, tq_bits)), 2};
  }
  return {};
}

}  // namespace

KvRecord KeyRecord(KvDtype dtype, int32_t head_dim) {
  return Record(dtype, head_dim, TqKeyBits(dtype));
}
KvRecord ValueRecord(KvDtype dtype, int32_t head_dim) {
  return Record(dtype, head_dim, TqValueBits(dtype));
}

double KvBitsPerElement(KvDtype dtype, int32_t head_dim) {
  const double bits =
      8.0 * (KeyRecord(dtype, head_dim).bytes() + ValueRecord(dtype, head_dim).bytes());
  return bits / (2.0 * head_dim);
}

}  // namespace tq::kernels
