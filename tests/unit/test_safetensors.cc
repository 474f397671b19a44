// safetensors reader/writer. Files are built byte by byte here (header JSON
// written by hand, values with known IEEE bit patterns), and the bundled
// stories260K model.safetensors is checked against its config.json sizes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/common/error.h"
#include "engine/model/safetensors.h"
#include "tests/unit/temp_dir_test.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// 8-byte little-endian header length, header, data.
std::string Safetensors(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + data;
}

class SafetensorsTest : public testing::TempDirTest {
 protected:
  // Writes a file and expects SafetensorsFile to throw tq::Error naming it and `problem`.
  void ExpectBad(const std::string& bytes, const std::string& problem) {
    const std::string p = Path("bad.safetensors");
    WriteAll(p, bytes);
    try {
      SafetensorsFile f(p);
      ADD_FAILURE() << "no error for " << problem;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(p));
      EXPECT_THAT(e.what(), HasSubstr(problem));
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  void ExpectBadHeader(const std::string& header, const std::string& data,
                       const std::string& problem) {
    ExpectBad(Safetensors(header, data), problem);
  }
};

const std::string kModel = std::string(TQ_MODEL_DIR) + "/model.safetensors";

TEST_F(SafetensorsTest, ParsesHandBuiltFileWithKnownValues) {
  const std::string header = R"({"__metadata__":{"format":"pt","note":"x"},)"
                             R"("h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
                             R"("s":{"dtype":"F32","shape":[],"data_offsets":[12,16]},)"
                             R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[16,16]}})";
  // F16: 0x3C00 = 1.0, 0xC000 = -2.0, 0x0001 = 2^-24 (smallest subnormal), 0x7BFF = 65504.
  // BF16: 0x3F80 = 1.0, 0xC040 = -3.0. F32: 0x3F000000 = 0.5.
  const std::string data(
      "\x00\x3c\x00\xc0\x01\x00\xff\x7b"
      "\x80\x3f\x40\xc0"
      "\x00\x00\x00\x3f",
      16);
  const std::string p = Path("ok.safetensors");
  WriteAll(p, Safetensors(header, data));
  SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "x");
  ASSERT_EQ(f.tensors().size(), 4u);

  const TensorInfo& h = f.tensors().at("h");
  EXPECT_EQ(h.dtype, TensorDtype::kF16);
  EXPECT_EQ(h.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(h.NumElements(), 4);
  EXPECT_EQ(h.nbytes, 8u);
  EXPECT_EQ(h.file, p);
  float hv[4];
  h.ToFloat(hv);
  EXPECT_EQ(hv[0], 1.0f);
  EXPECT_EQ(hv[1], -2.0f);
  EXPECT_EQ(hv[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(hv[3], 65504.0f);

  const TensorInfo& b = f.tensors().at("b");
  EXPECT_EQ(b.dtype, TensorDtype::kBF16);
  float bv[2];
  b.ToFloat(bv);
  EXPECT_EQ(bv[0], 1.0f);
  EXPECT_EQ(bv[1], -3.0f);

  const TensorInfo& s = f.tensors().at("s");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.NumElements(), 1);
  float sv = 0;
  s.ToFloat(&sv);
  EXPECT_EQ(sv, 0.5f);

  EXPECT_EQ(f.tensors().at("e").NumElements(), 0);
  EXPECT_STREQ(TensorDtypeName(TensorDtype::kBF16), "BF16");
  EXPECT_EQ(TensorDtypeBytes(TensorDtype::kF32), 4u);
  EXPECT_EQ(TensorDtypeBytes(TensorDtype::kF16), 2u);
}

TEST_F(SafetensorsTest, ReadsBundledModelAtConfigShapes) {
  // models/stories260K/config.json: hidden 64, inter 172, 5 layers, 8 heads,
  // 4 KV heads, head_dim 8, vocab 512, tied embeddings (no lm_head).
  SafetensorsFile f(kModel);
  EXPECT_EQ(f.tensors().size(), 1u + 5u * 9u + 1u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& t = f.tensors();
  EXPECT_EQ(t.at("model.embed_tokens.weight").shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(t.at("model.layers.4.self_attn.k_proj.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(t.at("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(t.count("lm_head.weight"), 0u);
  size_t total = 0;
  for (const auto& [name, info] : t) {
    EXPECT_EQ(info.dtype, TensorDtype::kF32) << name;
    total += info.nbytes;
  }
  // Read the first embedding values from the raw bytes independently.
  const std::string raw = ReadAll(kModel);
  uint64_t hlen = 0;
  std::memcpy(&hlen, raw.data(), 8);
  EXPECT_EQ(total, raw.size() - 8 - hlen);  // tensors fill the data section exactly
  const TensorInfo& emb = t.at("model.embed_tokens.weight");
  std::vector<float> v(static_cast<size_t>(emb.NumElements()));
  emb.ToFloat(v.data());
  float first[3];
  std::memcpy(first, raw.data() + 8 + hlen, sizeof first);
  EXPECT_EQ(v[0], first[0]);
  EXPECT_EQ(v[1], first[1]);
  EXPECT_EQ(v[2], first[2]);
}

TEST_F(SafetensorsTest, RejectsMalformedFiles) {
  const std::string ok_entry = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data8(8, '\0');
  ExpectBad("", "too short");
  ExpectBad(std::string("\x10\x00\x00", 3), "too short");
  ExpectBad(Safetensors(ok_entry, data8).substr(0, 20), "exceeds the file size");
  ExpectBad(std::string("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10), "exceeds the file size");
  ExpectBadHeader("{not json", "", "not valid JSON");
  ExpectBadHeader(R"([1,2,3])", "", "not a JSON object");
  ExpectBadHeader(R"({"t":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", data8,
                  "tensor t has unsupported dtype I32");
  ExpectBadHeader(R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data8,
                  "unsupported dtype F64");
  ExpectBadHeader(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", data8, "dtype");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8,
                  "invalid shape");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data8,
                  "invalid shape");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", data8, "shape");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8, "data_offsets");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":["0","8"]}})", data8,
                  "data_offsets");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data8,
                  "data_offsets");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8,
                  "end before begin");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8,
                  "beyond the data section");
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8,
                  "size mismatch");
  ExpectBadHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}})",
                  data8, "overlap");
  // 2^62 * 2^62 elements: the element count overflows 64 bits.
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],)"
                  R"("data_offsets":[0,8]}})",
                  data8, "overflow");
  // 2^62 F32 elements: the byte count overflows.
  ExpectBadHeader(R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})",
                  data8, "overflow");
  ExpectBadHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                  data8, "tensor a appears twice");
  ExpectBadHeader(R"({"__metadata__":{"k":1}})", "", "__metadata__");
  ExpectBadHeader(R"({"__metadata__":[]})", "", "__metadata__");
  ExpectBadHeader(R"({"t":[1]})", "", "not a JSON object");
}

TEST_F(SafetensorsTest, MissingFileIsAnError) {
  const std::string p = Path("absent.safetensors");
  try {
    SafetensorsFile f(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(p));
    EXPECT_THAT(e.what(), HasSubstr("cannot open"));
  }
}

TEST_F(SafetensorsTest, TruncatedBundledModelIsRejected) {
  const std::string raw = ReadAll(kModel);
  uint64_t hlen = 0;
  std::memcpy(&hlen, raw.data(), 8);
  ASSERT_EQ(hlen, 4848u);  // as written by the conversion script
  const std::pair<size_t, const char*> cuts[] = {
      {0, "too short"},       {5, "too short"},          {8, "exceeds the file size"},
      {100, "exceeds"},       {8 + hlen - 1, "exceeds"}, {8 + hlen, "beyond the data section"},
      {500000, "truncated?"}, {raw.size() - 1, "beyond"}};
  for (const auto& [size, problem] : cuts) {
    SCOPED_TRACE(size);
    ExpectBad(raw.substr(0, size), problem);
  }
}

TEST_F(SafetensorsTest, CorruptedHeaderBytesNeverCrash) {
  const std::string raw = ReadAll(kModel);
  const std::string p = Path("flip.safetensors");
  std::mt19937 rng(1234);
  int errors = 0, loaded = 0;
  // Every header byte (and the length field) flipped to a few values.
  WriteAll(p, raw);
  for (size_t pos = 0; pos < 8 + 4848; pos += 5) {
    for (const uint8_t x : {0x01, 0x20, 0xff}) {
      {  // patch one byte in place (rewriting 1 MB per case is slow)
        std::fstream io(p, std::ios::binary | std::ios::in | std::ios::out);
        io.seekp(static_cast<std::streamoff>(pos));
        io.put(static_cast<char>(raw[pos] ^ x));
      }
      try {
        SafetensorsFile f(p);
        ++loaded;
      } catch (const Error& e) {
        ++errors;
        ASSERT_THAT(e.what(), HasSubstr(p));
        ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      }
      std::fstream io(p, std::ios::binary | std::ios::in | std::ios::out);
      io.seekp(static_cast<std::streamoff>(pos));
      io.put(raw[pos]);
    }
  }
  EXPECT_GT(errors, 1200);
  // Random garbage after a plausible length.
  for (int i = 0; i < 200; ++i) {
    std::string bad = Safetensors(std::string(64, ' '), "");
    for (size_t j = 8; j < bad.size(); ++j) bad[j] = static_cast<char>(rng() & 0xff);
    WriteAll(p, bad);
    EXPECT_THROW(SafetensorsFile f(p), Error);
  }
  // The first header byte '{' changed: never a valid object.
  std::string bad = raw;
  bad[8] = '[';
  ExpectBad(bad, "JSON");
  (void)loaded;
}

TEST_F(SafetensorsTest, WriteRoundTrip) {
  const std::string p = Path("rt.safetensors");
  std::vector<TensorToWrite> ts;
  ts.push_back({"w32", TensorDtype::kF32, {2, 3}, [](uint8_t* dst, size_t n) {
                  ASSERT_EQ(n, 24u);
                  for (int i = 0; i < 6; ++i) {
                    const float v = 0.25f * static_cast<float>(i) - 1.0f;
                    std::memcpy(dst + 4 * i, &v, 4);
                  }
                }});
  ts.push_back({"w16", TensorDtype::kF16, {3}, [](uint8_t* dst, size_t n) {
                  ASSERT_EQ(n, 6u);
                  const uint8_t bytes[6] = {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x00};
                  std::memcpy(dst, bytes, 6);
                }});
  ts.push_back({"wbf", TensorDtype::kBF16, {1, 1}, [](uint8_t* dst, size_t) {
                  dst[0] = 0x80;
                  dst[1] = 0x3f;
                }});
  ts.push_back({"empty", TensorDtype::kF32, {0}, nullptr});
  WriteSafetensors(p, ts, {{"format", "pt"}});

  const std::string raw = ReadAll(p);
  uint64_t hlen = 0;
  std::memcpy(&hlen, raw.data(), 8);
  EXPECT_EQ(hlen % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + hlen + 24 + 6 + 2);
  EXPECT_EQ(raw[8], '{');

  SafetensorsFile f(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 4u);
  const TensorInfo& w32 = f.tensors().at("w32");
  EXPECT_EQ(w32.shape, (std::vector<int64_t>{2, 3}));
  float v[6];
  w32.ToFloat(v);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], 0.25f * static_cast<float>(i) - 1.0f);
  float h[3];
  f.tensors().at("w16").ToFloat(h);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 0.0f);
  float b = 0;
  f.tensors().at("wbf").ToFloat(&b);
  EXPECT_EQ(b, 1.0f);
  // Data lies in write order.
  EXPECT_EQ(f.tensors().at("w32").data + 24, f.tensors().at("w16").data);
}

TEST_F(SafetensorsTest, WriteRejectsDuplicateNamesAndBadPaths) {
  std::vector<TensorToWrite> ts = {{"a", TensorDtype::kF32, {1}, nullptr},
                                   {"a", TensorDtype::kF32, {1}, nullptr}};
  EXPECT_THROW(WriteSafetensors(Path("dup.safetensors"), ts), Error);
  try {
    WriteSafetensors(Path("no/such/dir/x.safetensors"), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.safetensors"));
  }
}

TEST_F(SafetensorsTest, CheckpointFindsAndChecksBundledTensors) {
  SafetensorsCheckpoint ckpt(TQ_MODEL_DIR);
  EXPECT_EQ(ckpt.size(), 47u);
  EXPECT_EQ(ckpt.Find("lm_head.weight"), nullptr);
  EXPECT_EQ(ckpt.Require("model.norm.weight", {64}).nbytes, 256u);
  try {
    ckpt.Require("model.embed_tokens.weight", {64, 512});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(kModel));
    EXPECT_THAT(e.what(), HasSubstr("has shape [512, 64], expected [64, 512]"));
  }
  try {
    ckpt.Require("lm_head.weight", {512, 64});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(TQ_MODEL_DIR));
    EXPECT_THAT(e.what(), HasSubstr("tensor lm_head.weight is missing"));
  }
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  const std::string a = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string b = R"({"y":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  WriteAll(Path("s1.safetensors"), Safetensors(a, std::string(4, '\0')));
  WriteAll(Path("s2.safetensors"), Safetensors(b, std::string(4, '\0')));
  const std::string index_path = Path("model.safetensors.index.json");
  WriteAll(
      index_path,
      R"({"metadata":{"total_size":8},"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})");
  {
    SafetensorsCheckpoint ckpt(dir_.string());
    EXPECT_EQ(ckpt.size(), 2u);
    EXPECT_EQ(ckpt.Require("y", {2}).file, Path("s2.safetensors"));
  }
  auto expect_error = [&](const std::string& where, const std::string& problem) {
    try {
      SafetensorsCheckpoint ckpt(dir_.string());
      ADD_FAILURE() << problem;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(where));
      EXPECT_THAT(e.what(), HasSubstr(problem));
    }
  };
  WriteAll(index_path, R"({"weight_map":{"x":"s1.safetensors","z":"s3.safetensors"}})");
  expect_error("s3.safetensors", "not found");
  WriteAll(index_path, R"({"weight_map":{"x":"s1.safetensors","z":"s2.safetensors"}})");
  expect_error("s2.safetensors", "tensor z listed in model.safetensors.index.json is missing");
  WriteAll(Path("s2.safetensors"), Safetensors(a, std::string(4, '\0')));
  WriteAll(index_path, R"({"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})");
  expect_error("s2.safetensors", "also appears in");
  WriteAll(index_path, R"({"weight_map":{"x":"../s1.safetensors"}})");
  expect_error(index_path, "invalid file");
  WriteAll(index_path, R"({"weight_map": 3})");
  expect_error(index_path, "weight_map");
  WriteAll(index_path, "{");
  expect_error(index_path, "invalid JSON");
  fs::remove(index_path);
  expect_error(dir_.string(), "no model.safetensors");
}

}  // namespace
}  // namespace tq
