// Tokenizer against the Python sentencepiece reference (tests/reference/sp_ref.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;

std::unique_ptr<Tokenizer> LoadBundled(TokenizerSettings settings = {}) {
  return Tokenizer::Load(TQ_MODEL_DIR, settings);
}

nlohmann::json LoadReference() {
  const std::string path = TQ_REF_DIR "/sp_reference.json";
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << path << " missing: run `ctest -R reference.sentencepiece` first";
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(in);
}

std::string ThrownMessage(const std::string& dir) {
  try {
    Tokenizer::Load(dir, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Tokenizer, BundledModelBasics) {
  auto tok = LoadBundled();
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), kBos);
  EXPECT_EQ(tok->eos_id(), kEos);
  EXPECT_EQ(tok->IdToPiece(403), "\xE2\x96\x81Once");
  EXPECT_EQ(tok->IdToPiece(13), "<0x0A>");
  EXPECT_EQ(tok->IdToPiece(kBos), "<s>");
  EXPECT_EQ(tok->IdToPiece(-1), "");
  EXPECT_EQ(tok->IdToPiece(512), "");
}

TEST(Tokenizer, EncodeMatchesPythonSentencepiece) {
  auto tok = LoadBundled();
  const auto ref = LoadReference();
  ASSERT_TRUE(ref.contains("encode"));
  ASSERT_GE(ref["encode"].size(), 15u);
  EXPECT_EQ(ref["vocab_size"].get<int>(), tok->vocab_size());
  for (const auto& c : ref["encode"]) {
    const auto text = c["text"].get<std::string>();
    const auto want = c["ids"].get<Ids>();
    SCOPED_TRACE("text: \"" + text + "\"");
    EXPECT_EQ(tok->Encode(text, /*add_special=*/false), want);
    Ids with_bos = {kBos};
    with_bos.insert(with_bos.end(), want.begin(), want.end());
    EXPECT_EQ(tok->Encode(text), with_bos);
    EXPECT_EQ(tok->Decode(want), c["decoded"].get<std::string>());
    const auto pieces = c["pieces"].get<std::vector<std::string>>();
    ASSERT_EQ(pieces.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(tok->IdToPiece(want[i]), pieces[i]);
  }
}

TEST(Tokenizer, DecodeMatchesPythonSentencepiece) {
  auto tok = LoadBundled();
  const auto ref = LoadReference();
  ASSERT_TRUE(ref.contains("decode"));
  ASSERT_GE(ref["decode"].size(), 8u);
  for (const auto& c : ref["decode"]) {
    const auto ids = c["ids"].get<Ids>();
    SCOPED_TRACE("ids: " + c["ids"].dump());
    EXPECT_EQ(tok->Decode(ids), c["text"].get<std::string>());
  }
}

TEST(Tokenizer, KnownEncodingsOfTheBundledModel) {
  auto tok = LoadBundled();
  EXPECT_EQ(tok->Encode("Once upon a time"), (Ids{kBos, 403, 407, 261, 378}));
  // Byte fallback: 中 is not in the 512-piece vocabulary -> "▁" + its 3 bytes
  // as <0xE4><0xB8><0xAD> (byte b is id b + 3).
  EXPECT_EQ(tok->Encode("中", false), (Ids{410, 0xE4 + 3, 0xB8 + 3, 0xAD + 3}));
  EXPECT_EQ(tok->Encode("😀", false), (Ids{410, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3}));
}

TEST(Tokenizer, BosAddedExactlyOnceAndEmptyInputIsJustBos) {
  auto tok = LoadBundled();
  EXPECT_EQ(tok->Encode(""), Ids{kBos});
  EXPECT_EQ(tok->Encode("", false), Ids{});
  const Ids ids = tok->Encode("Once upon a time, there was a little girl.");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), kBos);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kBos), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kEos), 0);
}

TEST(Tokenizer, SettingsFromTokenizerConfigAddBosOnly) {
  const ModelFiles mf = LoadModelFiles(TQ_MODEL_DIR);
  EXPECT_TRUE(mf.tokenizer.add_bos_token);
  EXPECT_FALSE(mf.tokenizer.add_eos_token);
  auto tok = Tokenizer::Load(TQ_MODEL_DIR, mf.tokenizer);
  EXPECT_EQ(tok->Encode("Once"), (Ids{kBos, 403}));
}

TEST(Tokenizer, AddEosTokenAndNoBos) {
  TokenizerSettings s;
  s.add_bos_token = true;
  s.add_eos_token = true;
  auto tok = LoadBundled(s);
  EXPECT_EQ(tok->Encode("Once upon"), (Ids{kBos, 403, 407, kEos}));
  EXPECT_EQ(tok->Encode(""), (Ids{kBos, kEos}));
  EXPECT_EQ(tok->Encode("Once upon", false), (Ids{403, 407}));
  s.add_bos_token = false;
  auto no_bos = LoadBundled(s);
  EXPECT_EQ(no_bos->Encode("Once upon"), (Ids{403, 407, kEos}));
  s.add_eos_token = false;
  auto none = LoadBundled(s);
  EXPECT_EQ(none->Encode(""), Ids{});
}

TEST(Tokenizer, DecodeSkipsControlAndOutOfRangeIds) {
  auto tok = LoadBundled();
  EXPECT_EQ(tok->Decode(Ids{kBos, 403, 407, kEos}), "Once upon");
  EXPECT_EQ(tok->Decode(Ids{kBos, kEos, kBos}), "");
  EXPECT_EQ(tok->Decode(Ids{403, -5, 512, 100000, 407}), "Once upon");
  EXPECT_EQ(tok->Decode(Ids{}), "");
  // Round trip through Encode with specials.
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
}

TEST(Tokenizer, ByteFallbackPiecesDecodeToUtf8) {
  auto tok = LoadBundled();
  auto bytes = [](std::initializer_list<int> bs) {
    Ids ids;
    for (int b : bs) ids.push_back(b + 3);  // <0xNN> is id NN + 3
    return ids;
  };
  EXPECT_EQ(tok->IdToPiece(0xE4 + 3), "<0xE4>");
  EXPECT_EQ(tok->Decode(bytes({0xC3, 0xA9})), "\xC3\xA9");                      // é
  EXPECT_EQ(tok->Decode(bytes({0xE4, 0xB8, 0xAD})), "\xE4\xB8\xAD");            // 中
  EXPECT_EQ(tok->Decode(bytes({0xF0, 0x9F, 0x98, 0x80})), "\xF0\x9F\x98\x80");  // 😀
  // Incomplete sequences become U+FFFD, one per byte, as sentencepiece does.
  EXPECT_EQ(tok->Decode(bytes({0xE4, 0xB8})), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok->Decode(tok->Encode("naïve café 中文 😀")), "naïve café 中文 😀");
}

// TokenBytes against sentencepiece's own decoder: a piece's mid-text bytes are
// what Decode gives behind the anchor piece (which keeps the leading space).
TEST(Tokenizer, TokenBytesMatchSentencepieceDecodeMidText) {
  auto tok = LoadBundled();
  const int32_t anchor = tok->anchor_id();
  ASSERT_GE(anchor, 0);
  const std::string anchor_text = tok->IdToPiece(anchor);
  int checked = 0;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    const std::string piece = tok->IdToPiece(id);
    if (id <= kEos) continue;                                     // <unk>, <s>, </s>: below
    if (piece.size() == 6 && piece.starts_with("<0x")) continue;  // bytes: next test
    const Ids two = {anchor, id};
    const std::string text = tok->Decode(two);
    ASSERT_TRUE(text.starts_with(anchor_text)) << id;
    EXPECT_EQ(tok->TokenBytes(id), text.substr(anchor_text.size())) << "id " << id << " " << piece;
    ++checked;
  }
  EXPECT_GT(checked, 200);
  EXPECT_EQ(tok->TokenBytes(403), " Once");
  EXPECT_EQ(tok->TokenBytes(kBos), "");
  EXPECT_EQ(tok->TokenBytes(kEos), "");
  EXPECT_EQ(tok->TokenBytes(0), "");  // <unk>: not text (Decode renders it " ⁇ ")
  EXPECT_EQ(tok->TokenBytes(-1), "");
  EXPECT_EQ(tok->TokenBytes(512), "");
}

TEST(Tokenizer, TokenBytesOfByteFallbackPiecesAreSingleBytes) {
  auto tok = LoadBundled();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    ASSERT_EQ(tok->IdToPiece(b + 3), name);
    EXPECT_EQ(tok->TokenBytes(b + 3), std::string(1, static_cast<char>(b))) << name;
  }
  // Concatenated TokenBytes of an encoding are the text with SentencePiece's
  // dummy-prefix space in front (Decode drops it at the start of text).
  for (const std::string text :
       {"Once upon a time", "na\xC3\xAFve caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80",
        "a  b\n\nc"}) {
    std::string bytes;
    for (int32_t id : tok->Encode(text, false)) bytes += tok->TokenBytes(id);
    EXPECT_EQ(bytes, " " + tok->Decode(tok->Encode(text, false))) << text;
  }
}

TEST(Tokenizer, MissingModelIsAnError) {
  const fs::path dir = fs::temp_directory_path() / "tq_tok_missing";
  fs::create_directories(dir);
  fs::remove(dir / "tokenizer.model");
  EXPECT_EQ(ThrownMessage(dir.string()), (dir / "tokenizer.model").string() + ": not found");
}

TEST(Tokenizer, CorruptModelIsAnError) {
  const fs::path dir = fs::temp_directory_path() / "tq_tok_corrupt";
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "tokenizer.model", std::ios::binary);
    out << "this is not a protobuf \xFF\xFF\xFF\xFF";
  }
  const std::string msg = ThrownMessage(dir.string());
  const std::string want =
      (dir / "tokenizer.model").string() + ": not a valid SentencePiece model: ";
  EXPECT_EQ(msg.substr(0, want.size()), want) << msg;
  EXPECT_GT(msg.size(), want.size());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tq
