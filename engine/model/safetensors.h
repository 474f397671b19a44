// Reader and writer for the safetensors format (Hugging Face,
// https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tq {

/// Element types tqserve reads. Others (F64, I32, ...) are rejected at load.
/// U8 holds packed integer weight codes and I8 signed bytes (quantized
/// checkpoints, docs/quantization.md).
enum class TensorDtype : uint8_t { kF32, kF16, kBF16, kU8, kI8 };

/// "F32", "F16", "BF16", "U8", "I8".
const char* TensorDtypeName(TensorDtype dtype);
size_t TensorDtypeBytes(TensorDtype dtype);

/// One tensor inside a mapped file. `data` points into the mapping, which
/// lives as long as the SafetensorsFile that returned it.
struct TensorInfo {
  std::string name;
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file it lives in, for error messages

  int64_t NumElements() const;
  /// Elements [begin, begin + count) in storage order as a 1-D tensor of
  /// their own (a view of the same bytes; the range must lie inside).
  TensorInfo Elements(int64_t begin, int64_t count) const;
  /// Converts to fp32 into out[NumElements()] (U8/I8: the integer values).
  void ToFloat(float* out) const;
};

/// A read-only mmap of one .safetensors file, validated on open: header length
/// within the file, header is a JSON object, every dtype known, every shape
/// non-negative, data_offsets inside the data section with end - begin equal
/// to numel * dtype size, tensors not overlapping. Throws tq::Error naming the
/// file and the problem. Thread-safe for concurrent reads after construction.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// All tensors of a checkpoint: `model.safetensors`, or the shards listed by
/// `model.safetensors.index.json` ("weight_map"). Throws tq::Error when no
/// weights file exists, a shard is missing, a tensor is listed in the index
/// but absent from its shard, or a name appears twice.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& model_dir);

  /// nullptr when absent.
  const TensorInfo* Find(const std::string& name) const;
  /// Throws tq::Error "<dir>: tensor <name> is missing" when absent, and
  /// "<file>: tensor <name> has shape [..], expected [..]" on a shape mismatch.
  const TensorInfo& Require(const std::string& name, const std::vector<int64_t>& shape) const;
  size_t size() const { return index_.size(); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

/// A tensor to write: its name, dtype and shape, and a callback that fills
/// its little-endian bytes (called once, in file order, so multi-GB
/// checkpoints stream through a small buffer instead of living in memory).
struct TensorToWrite {
  std::string name;
  TensorDtype dtype = TensorDtype::kF32;
  std::vector<int64_t> shape;
  std::function<void(uint8_t* dst, size_t nbytes)> fill;
};

/// Writes a .safetensors file (header padded to a multiple of 8 bytes as the
/// reference implementation does). Throws tq::Error on I/O failure.
void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace tq
