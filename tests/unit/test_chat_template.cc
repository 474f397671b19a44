// ChatTemplate: the Llama-2, Llama-3, Llama-3.1, ChatML, Qwen2.5 and
// Mistral templates of tests/data/chat_templates.json rendered through the
// ChatTemplate API and compared byte for byte with Python jinja2
// (tests/reference/jinja_ref.py); tokenization of rendered prompts; the
// plain fallback of the bundled model, which has no template.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/common/error.h"
#include "server/text/chat_template.h"
#include "temp_dir_test.h"

namespace tq {
namespace testing {
nlohmann::ordered_json ReadJsonFile(const std::string& path);  // test_jinja.cc
}  // namespace testing

namespace {

using json = nlohmann::ordered_json;
using Ids = std::vector<int32_t>;
using testing::ReadJsonFile;

class ChatTemplateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    files_ = new ModelFiles(LoadModelFiles(TQ_MODEL_DIR));
    tok_ = Tokenizer::Load(TQ_MODEL_DIR, files_->tokenizer).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete files_;
    tok_ = nullptr;
    files_ = nullptr;
  }

  // The bundled model's files with another chat template and special tokens.
  static ModelFiles WithTemplate(const std::string& source, const std::string& bos,
                                 const std::string& eos) {
    ModelFiles f = *files_;
    f.tokenizer.chat_template = source;
    f.tokenizer.bos_token = bos;
    f.tokenizer.eos_token = eos;
    return f;
  }

  static std::vector<ChatMessage> Messages(const json& j) {
    std::vector<ChatMessage> out;
    for (const json& m : j) out.push_back({m["role"], m["content"]});
    return out;
  }

  static ModelFiles* files_;
  static Tokenizer* tok_;
};
ModelFiles* ChatTemplateTest::files_ = nullptr;
Tokenizer* ChatTemplateTest::tok_ = nullptr;

TEST_F(ChatTemplateTest, RendersLikeJinja2) {
  const json chat = ReadJsonFile(std::string(TQ_TEST_DATA_DIR) + "/chat_templates.json");
  const json ref = ReadJsonFile(std::string(TQ_REF_DIR) + "/jinja_reference.json")["chat"];
  std::set<std::string> names;
  int outputs = 0;
  int raised = 0;
  for (const json& t : chat["templates"]) {
    names.insert(t["name"]);
    const ChatTemplate tmpl(WithTemplate(t["source"], t["bos_token"], t["eos_token"]), *tok_);
    EXPECT_FALSE(tmpl.uses_fallback());
    for (const json& c : chat["conversations"]) {
      if (c.contains("extra") || c.contains("templates")) continue;  // test_jinja.cc renders those
      const std::string key = t["name"].get<std::string>() + "/" + c["name"].get<std::string>();
      SCOPED_TRACE(key);
      ASSERT_TRUE(ref.contains(key));
      const json& want = ref[key];
      try {
        const std::string got = tmpl.Render(Messages(c["messages"]), c["add_generation_prompt"]);
        ASSERT_TRUE(want.contains("output")) << "jinja2 fails with " << want.dump();
        EXPECT_EQ(got, want["output"].get<std::string>());
        ++outputs;
      } catch (const ChatTemplateError& e) {
        ASSERT_TRUE(want.contains("error")) << "we fail: " << e.what();
        if (want["error"] == "raise") {
          EXPECT_EQ(e.what(), want["message"].get<std::string>());
          ++raised;
        }
      }
    }
  }
  for (const char* required : {"llama2", "llama3", "chatml", "qwen2.5", "mistral-v0.1"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
  EXPECT_GE(outputs, 40);
  EXPECT_GE(raised, 5);  // roles that do not alternate, for Llama-2 and Mistral
}

// In the bundled vocabulary "<s>" and "</s>" are control pieces 1 and 2.
// A Llama-2 prompt is then BOS, the encoded text between the special
// strings, EOS... each text span encoded on its own (transformers' legacy
// LlamaTokenizer behavior), no BOS added on top of the template's.
TEST_F(ChatTemplateTest, TokenizeSplitsSpecialTokens) {
  const json chat = ReadJsonFile(std::string(TQ_TEST_DATA_DIR) + "/chat_templates.json");
  const json& llama2 = chat["templates"][0];
  ASSERT_EQ(llama2["name"], "llama2");
  ASSERT_EQ(tok_->IdToPiece(1), "<s>");
  ASSERT_EQ(tok_->IdToPiece(2), "</s>");
  const ChatTemplate tmpl(WithTemplate(llama2["source"], "<s>", "</s>"), *tok_);
  const std::string prompt = tmpl.Render(
      {{"user", "Hi!"}, {"assistant", "Hello."}, {"user", "Again?"}, {"assistant", "Sure."}},
      false);
  ASSERT_EQ(prompt, "<s>[INST] Hi! [/INST] Hello. </s><s>[INST] Again? [/INST] Sure. </s>");
  Ids want = {1};
  for (const int32_t id : tok_->Encode("[INST] Hi! [/INST] Hello. ", false)) want.push_back(id);
  want.insert(want.end(), {2, 1});
  for (const int32_t id : tok_->Encode("[INST] Again? [/INST] Sure. ", false)) want.push_back(id);
  want.push_back(2);
  EXPECT_EQ(tmpl.Tokenize(prompt), want);

  // Special strings typed by a user become special tokens too (as with
  // transformers' apply_chat_template(tokenize=True)).
  Ids typed = {2};
  for (const int32_t id : tok_->Encode(" and ", false)) typed.push_back(id);
  typed.push_back(1);
  EXPECT_EQ(tmpl.Tokenize("</s> and <s>"), typed);
  // Adjacent specials, and text without any.
  EXPECT_EQ(tmpl.Tokenize("<s></s><s>"), (Ids{1, 2, 1}));
  EXPECT_EQ(tmpl.Tokenize("plain text"), tok_->Encode("plain text", false));
  EXPECT_EQ(tmpl.Tokenize(""), Ids{});
}

// Strings that are not pieces of the vocabulary ("<|im_start|>" here) are
// ordinary text.
TEST_F(ChatTemplateTest, UnknownSpecialStringsAreText) {
  const ChatTemplate tmpl(
      WithTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                   "{% endfor %}",
                   "<s>", "<|im_end|>"),
      *tok_);
  const std::string prompt = tmpl.Render({{"user", "Hi"}}, true);
  EXPECT_EQ(prompt, "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(tmpl.Tokenize(prompt), tok_->Encode(prompt, false));
}

TEST_F(ChatTemplateTest, BundledModelUsesThePlainFallback) {
  ASSERT_TRUE(files_->tokenizer.chat_template.empty());
  const ChatTemplate tmpl(*files_, *tok_);
  EXPECT_TRUE(tmpl.uses_fallback());
  // docs/chat.md: the contents, separated by blank lines; roles are dropped
  // and add_generation_prompt adds nothing.
  EXPECT_EQ(tmpl.Render({{"system", "Be nice."}, {"user", "Once upon a time"}}, true),
            "Be nice.\n\nOnce upon a time");
  EXPECT_EQ(tmpl.Render({{"user", "Hi"}}, false), "Hi");
  EXPECT_EQ(tmpl.Render({}, true), "");

  // One user message gives the same tokens as the completions prompt of
  // llama2.c's reference run: "# prompt tokens [1, 403, 407, 261, 378]".
  std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/reference_greedy_ids_once_upon_a_time.txt");
  std::string line;
  std::getline(in, line);
  ASSERT_EQ(line, "# prompt tokens [1, 403, 407, 261, 378]");
  EXPECT_EQ(tmpl.Tokenize(tmpl.Render({{"user", "Once upon a time"}}, true)),
            (Ids{1, 403, 407, 261, 378}));
  // Special strings in fallback text stay text.
  Ids want = {1};
  for (const int32_t id : tok_->Encode("a </s> b", false)) want.push_back(id);
  EXPECT_EQ(tmpl.Tokenize("a </s> b"), want);
}

TEST_F(ChatTemplateTest, FallbackWithoutBosWhenConfigSaysSo) {
  ModelFiles f = *files_;
  f.tokenizer.add_bos_token = false;
  const ChatTemplate tmpl(f, *tok_);
  EXPECT_EQ(tmpl.Tokenize("Once upon a time"), (Ids{403, 407, 261, 378}));
}

// strftime_now (transformers' global; Llama 3.2's template dates its system
// header with it) against coreutils date(1) in the same locale. Rendered
// before and after date runs: when both renders agree, date saw that day too.
TEST_F(ChatTemplateTest, StrftimeNowFormatsTheLocalTime) {
  const ChatTemplate tmpl(WithTemplate(R"({{ strftime_now("%d %b %Y") }})", "<s>", "</s>"), *tok_);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string before = tmpl.Render({{"user", "hi"}}, false);
    std::string date;
    FILE* p = popen("LC_ALL=C date '+%d %b %Y'", "r");
    ASSERT_NE(p, nullptr);
    char buf[64];
    while (std::fgets(buf, sizeof buf, p)) date += buf;
    pclose(p);
    if (!date.empty() && date.back() == '\n') date.pop_back();
    if (tmpl.Render({{"user", "hi"}}, false) != before) continue;  // midnight passed
    EXPECT_EQ(before, date);
    return;
  }
  FAIL() << "the date kept changing";
}

TEST_F(ChatTemplateTest, TemplateSyntaxErrorNamesFileAndLine) {
  try {
    ChatTemplate tmpl(WithTemplate("{% for m in messages %}\n{{ m.content }\n", "<s>", "</s>"),
                      *tok_);
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tokenizer_config.json"), std::string::npos) << what;
    EXPECT_NE(what.find("line 2"), std::string::npos) << what;
  }
}

TEST_F(ChatTemplateTest, RenderErrorsAreChatTemplateErrors) {
  const ChatTemplate tmpl(WithTemplate("{{ messages[0].content + 1 }}", "<s>", "</s>"), *tok_);
  EXPECT_THROW(tmpl.Render({{"user", "x"}}, true), ChatTemplateError);
  const ChatTemplate raising(
      WithTemplate("{{ raise_exception('no ' ~ messages[0].role) }}", "<s>", "</s>"), *tok_);
  try {
    raising.Render({{"system", "x"}}, true);
    FAIL() << "rendered";
  } catch (const ChatTemplateError& e) {
    EXPECT_STREQ(e.what(), "no system");
  }
}

class SpecialTokenConfigTest : public testing::TempDirTest {
 protected:
  void WriteModel(const std::string& tokenizer_config) {
    std::filesystem::copy_file(std::string(TQ_MODEL_DIR) + "/config.json", Path("config.json"));
    std::ofstream(Path("tokenizer_config.json")) << tokenizer_config;
  }
};

TEST_F(SpecialTokenConfigTest, BundledModelStrings) {
  const ModelFiles f = LoadModelFiles(TQ_MODEL_DIR);
  EXPECT_EQ(f.tokenizer.bos_token, "<s>");
  EXPECT_EQ(f.tokenizer.eos_token, "</s>");
}

TEST_F(SpecialTokenConfigTest, AddedTokenObjectsAndNull) {
  WriteModel(R"({"bos_token": {"__type": "AddedToken", "content": "<|begin_of_text|>",
                 "lstrip": false}, "eos_token": null})");
  const ModelFiles f = LoadModelFiles(dir_.string());
  EXPECT_EQ(f.tokenizer.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(f.tokenizer.eos_token, "");
}

TEST_F(SpecialTokenConfigTest, WrongTypeIsAnError) {
  WriteModel(R"({"eos_token": 2})");
  try {
    LoadModelFiles(dir_.string());
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eos_token"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tq
