// safetensors reader (read-only mmap, every field validated) and streaming writer.
// Format: https://huggingface.co/docs/safetensors ("8 bytes: N, an unsigned
// little-endian 64-bit integer ... N bytes: a JSON UTF-8 string ... rest: byte
// buffer"). Checks follow the reference Rust implementation (safetensors/src/
// tensor.rs: InvalidHeaderLength, InvalidOffset, TensorInvalidInfo, ...).
#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/common/error.h"
#include "kernels/half.h"

namespace tq {
namespace {

using json = nlohmann::json;

// what() must be one printable line even when the input is garbage.
std::string OneLine(std::string s) {
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return s;
}

[[noreturn]] void Fail(const std::string& path, const std::string& problem) {
  throw Error(OneLine(path + ": " + problem));
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// The dtype whose TensorDtypeName is `s`.
bool ParseDtype(const std::string& s, TensorDtype* dtype) {
  for (TensorDtype d : {TensorDtype::kF32, TensorDtype::kF16, TensorDtype::kBF16, TensorDtype::kU8,
                        TensorDtype::kI8}) {
    if (s == TensorDtypeName(d)) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

// A JSON value that must be a non-negative integer; returns false otherwise.
bool AsUint(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

// Parses one header entry into `info` (data pointer set by the caller).
// Returns [begin, end) relative to the data section.
std::pair<uint64_t, uint64_t> ParseEntry(const std::string& path, const std::string& name,
                                         const json& v, uint64_t data_size, TensorInfo* info) {
  const std::string t = "tensor " + name;
  if (!v.is_object()) Fail(path, t + ": header entry is not a JSON object");
  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) Fail(path, t + " has no string \"dtype\"");
  if (!ParseDtype(dt->get<std::string>(), &info->dtype)) {
    Fail(path, t + " has unsupported dtype " + dt->get<std::string>() +
                   " (supported: F32, F16, BF16, U8, I8)");
  }
  const auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) Fail(path, t + " has no \"shape\" array");
  uint64_t numel = 1;
  for (const json& d : *sh) {
    uint64_t dim = 0;
    if (!AsUint(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
      Fail(path, t + " has an invalid shape " + OneLine(sh->dump()) +
                     " (dimensions must be non-negative integers)");
    }
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      Fail(path, t + " has shape " + sh->dump() + " whose element count overflows");
    }
    info->shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(numel, TensorDtypeBytes(info->dtype), &expected) ||
      expected > static_cast<uint64_t>(INT64_MAX)) {
    Fail(path, t + " has shape " + sh->dump() + " whose byte size overflows");
  }
  const auto off = v.find("data_offsets");
  uint64_t begin = 0, end = 0;
  if (off == v.end() || !off->is_array() || off->size() != 2 || !AsUint((*off)[0], &begin) ||
      !AsUint((*off)[1], &end)) {
    Fail(path, t + " has invalid data_offsets (expected [begin, end] non-negative integers)");
  }
  if (end < begin) {
    Fail(path, t + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                   "] with end before begin");
  }
  if (end > data_size) {
    Fail(path, t + " has data_offsets end " + std::to_string(end) + " beyond the data section (" +
                   std::to_string(data_size) + " bytes; file truncated?)");
  }
  if (end - begin != expected) {
    Fail(path, t + " has " + std::to_string(end - begin) + " bytes of data, expected " +
                   std::to_string(expected) + " for " + dt->get<std::string>() + " shape " +
                   ShapeString(info->shape) + " (size mismatch)");
  }
  info->name = name;
  info->nbytes = static_cast<size_t>(expected);
  info->file = path;
  return {begin, end};
}

}  // namespace

const char* TensorDtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32:
      return "F32";
    case TensorDtype::kF16:
      return "F16";
    case TensorDtype::kBF16:
      return "BF16";
    case TensorDtype::kU8:
      return "U8";
    case TensorDtype::kI8:
      return "I8";
  }
  return "?";
}

size_t TensorDtypeBytes(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32:
      return 4;
    case TensorDtype::kF16:
    case TensorDtype::kBF16:
      return 2;
    case TensorDtype::kU8:
    case TensorDtype::kI8:
      return 1;
  }
  return 1;
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated against overflow at load
  return n;
}

TensorInfo TensorInfo::Elements(int64_t begin, int64_t count) const {
  const size_t esize = TensorDtypeBytes(dtype);
  TensorInfo part = *this;
  part.shape = {count};
  part.data = data + static_cast<size_t>(begin) * esize;
  part.nbytes = static_cast<size_t>(count) * esize;
  return part;
}

void TensorInfo::ToFloat(float* out) const {
  const size_t n = static_cast<size_t>(NumElements());
  switch (dtype) {
    case TensorDtype::kF32:
      if (n) std::memcpy(out, data, n * 4);
      break;
    case TensorDtype::kF16:
    case TensorDtype::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = dtype == TensorDtype::kF16 ? kernels::HalfToFloat(h) : kernels::Bf16ToFloat(h);
      }
      break;
    case TensorDtype::kU8:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(data[i]);
      break;
    case TensorDtype::kI8:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(data[i]));
      break;
  }
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail(path, "not a regular file");
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    Fail(path, "file is too short (" + std::to_string(file_size) +
                   " bytes) to hold a safetensors header; truncated?");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) Fail(path, std::string("mmap failed: ") + std::strerror(errno));
  map_ = map;
  map_size_ = file_size;
  try {
    const auto* bytes = static_cast<const uint8_t*>(map_);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    if (header_len > file_size - 8) {
      Fail(path, "header length " + std::to_string(header_len) + " exceeds the file size (" +
                     std::to_string(file_size) + " bytes); truncated or not a safetensors file");
    }
    json header;
    // nlohmann keeps the last of duplicate keys; a tensor named twice is an error.
    std::set<std::string> keys;
    std::string duplicate;
    const json::parser_callback_t on_key = [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && parsed.is_string() &&
          !keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
      return true;
    };
    try {
      header = json::parse(bytes + 8, bytes + 8 + header_len, on_key);
    } catch (const json::exception& e) {
      Fail(path, std::string("header is not valid JSON: ") + e.what());
    }
    if (!duplicate.empty()) Fail(path, "tensor " + duplicate + " appears twice in the header");
    if (!header.is_object()) Fail(path, "header is not a JSON object");
    const uint64_t data_size = file_size - 8 - header_len;
    const uint8_t* data = bytes + 8 + header_len;
    std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;
    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        if (!v.is_object()) Fail(path, "__metadata__ is not a JSON object");
        for (const auto& [k, s] : v.items()) {
          if (!s.is_string()) Fail(path, "__metadata__ value of '" + k + "' is not a string");
          metadata_[k] = s.get<std::string>();
        }
        continue;
      }
      TensorInfo info;
      const auto [begin, end] = ParseEntry(path, name, v, data_size, &info);
      info.data = data + begin;
      if (end > begin) ranges.emplace_back(begin, end, name);
      tensors_.emplace(name, std::move(info));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (std::get<0>(ranges[i]) < std::get<1>(ranges[i - 1])) {
        Fail(path, "tensors " + std::get<2>(ranges[i - 1]) + " and " + std::get<2>(ranges[i]) +
                       " overlap in the data section");
      }
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& model_dir) : dir_(model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  auto add_file = [&](const fs::path& p) -> SafetensorsFile& {
    files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
    for (const auto& [name, info] : files_.back()->tensors()) {
      if (!index_.emplace(name, &info).second) {
        Fail(p.string(), "tensor " + name + " also appears in " + index_[name]->file);
      }
    }
    return *files_.back();
  };
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    const std::string ip = index_path.string();
    std::ifstream in(index_path);
    if (!in) Fail(ip, "cannot open");
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      Fail(ip, std::string("invalid JSON: ") + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      Fail(ip, "no \"weight_map\" object");
    }
    std::map<std::string, SafetensorsFile*> shards;
    for (const auto& [name, v] : index["weight_map"].items()) {
      if (!v.is_string()) Fail(ip, "weight_map entry for " + name + " is not a string");
      const std::string shard = v.get<std::string>();
      // Shards live next to the index; refuse paths that would leave the directory.
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        Fail(ip, "weight_map entry for " + name + " names an invalid file '" + shard + "'");
      }
      auto it = shards.find(shard);
      if (it == shards.end()) {
        if (!fs::exists(dir / shard, ec)) {
          Fail((dir / shard).string(), "shard listed in model.safetensors.index.json not found");
        }
        it = shards.emplace(shard, &add_file(dir / shard)).first;
      }
      if (!it->second->tensors().count(name)) {
        Fail(it->second->path(),
             "tensor " + name + " listed in model.safetensors.index.json is missing");
      }
    }
  } else if (fs::exists(single, ec)) {
    add_file(single);
  } else {
    Fail(model_dir, "no model.safetensors or model.safetensors.index.json found");
  }
}

const TensorInfo* SafetensorsCheckpoint::Find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& SafetensorsCheckpoint::Require(const std::string& name,
                                                 const std::vector<int64_t>& shape) const {
  const TensorInfo* t = Find(name);
  if (!t) Fail(dir_, "tensor " + name + " is missing");
  if (t->shape != shape) {
    Fail(t->file, "tensor " + name + " has shape " + ShapeString(t->shape) + ", expected " +
                      ShapeString(shape));
  }
  return *t;
}

void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  size_t max_bytes = 0;
  std::vector<size_t> sizes;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) {
      Fail(path, "cannot write tensor " + t.name + ": duplicate or reserved name");
    }
    uint64_t n = TensorDtypeBytes(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) {
        Fail(path, "cannot write tensor " + t.name + ": invalid shape " + ShapeString(t.shape));
      }
    }
    header[t.name] = {{"dtype", TensorDtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
    sizes.push_back(static_cast<size_t>(n));
    max_bytes = std::max(max_bytes, static_cast<size_t>(n));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) Fail(path, std::string("cannot create: ") + std::strerror(errno));
  bool ok = true;
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  ok = ok && std::fwrite(len, 1, 8, f) == 8;
  ok = ok && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  std::vector<uint8_t> buf;
  try {
    buf.resize(max_bytes);
    for (size_t i = 0; i < tensors.size() && ok; ++i) {
      if (!sizes[i]) continue;
      if (tensors[i].fill) {
        tensors[i].fill(buf.data(), sizes[i]);
      } else {
        std::memset(buf.data(), 0, sizes[i]);
      }
      ok = std::fwrite(buf.data(), 1, sizes[i], f) == sizes[i];
    }
  } catch (...) {
    std::fclose(f);
    std::remove(path.c_str());
    throw;
  }
  const int err = errno;
  if (std::fclose(f) != 0) ok = false;
  if (!ok) {
    std::remove(path.c_str());
    Fail(path, std::string("write failed: ") + std::strerror(err));
  }
}

}  // namespace tq
