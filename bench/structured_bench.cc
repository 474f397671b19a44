// Structured-output cost: the per-step token mask (GrammarMatcher::FillMask +
// ApplyTokenMask over one logit row) at a given vocabulary size, and decode
// throughput of a batch with and without a constraint.
//
//   tq_bench_structured [--vocab 32000,128256] [--steps 200] [--walks 10]
//                       [--model DIR --batch 16 --output-tokens 64 --repeats 3]
//
// Mask part: a synthetic vocabulary of realistic pieces (words of the bundled
// TinyStories sample with and without a leading space, their prefixes and
// suffixes, JSON punctuation runs, numbers, the 256 single bytes) of each
// size; for JSON mode and a nested schema, `walks` random valid paths of
// `steps` tokens, each step timed (one core, the engine thread's work);
// p50/p99 in µs per sequence per step, plus the compile time.
// Decode part (with --model, e.g. a make-random-model checkpoint): B
// sequences decode with ignore_eos for output tokens, JSON mode vs none,
// interleaved per repeat; median decode tokens/s of each and the ratio. The
// grammar is compiled for a synthetic vocabulary of the model's size (the
// mask work is the same whatever the pieces are). See docs/PERFORMANCE.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"
#include "engine/structured/grammar_cache.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/token_mask.h"

namespace {

using Clock = std::chrono::steady_clock;
using tq::bench::Percentile;
using tq::structured::CompiledGrammar;
using tq::structured::TokenVocabulary;

struct Flags {
  std::vector<int> vocabs = {32000, 128256};
  int steps = 200;
  int walks = 10;
  std::string model;
  int batch = 16;
  int output_tokens = 64;
  int repeats = 3;
};

Flags Parse(int argc, char** argv) {
  Flags f;
  CLI::App app("Structured-output cost: token mask per step, and decode with a grammar.",
               "tq_bench_structured");
  tq::bench::AddList(app, "--vocab", f.vocabs, "Synthetic vocabulary sizes");
  app.add_option("--steps", f.steps)->capture_default_str();
  app.add_option("--walks", f.walks)->capture_default_str();
  app.add_option("--model", f.model, "Model directory: also measure decode");
  app.add_option("--batch", f.batch)->capture_default_str();
  app.add_option("--output-tokens", f.output_tokens)->capture_default_str();
  app.add_option("--repeats", f.repeats)->capture_default_str();
  tq::bench::ParseOrExit(app, argc, argv);
  return f;
}

// Pieces in the proportions of a BPE vocabulary: words, " word", prefixes,
// suffixes, punctuation runs and numbers, deduplicated, first the 256 bytes.
std::vector<std::string> SyntheticVocab(int size) {
  std::ifstream in(TQ_TEXT_SAMPLE);
  std::set<std::string> words;
  std::string w;
  while (in >> w) {
    words.insert(w);
    std::string letters;
    for (char c : w) {
      if (std::isalpha(static_cast<unsigned char>(c))) letters += c;
    }
    if (!letters.empty()) words.insert(letters);
  }
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& s) {
    if (static_cast<int>(out.size()) < size && !s.empty() && seen.insert(s).second) {
      out.push_back(s);
    }
  };
  out.assign(3, "");  // specials (2 = EOS)
  for (int b = 1; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  const char* punct[] = {"\":",     "\": ",   "\",", "\", \"", "{\"", "\"}",
                         "},",      "}, {\"", "[\"", "\"]",    "],",  "\": [",
                         "\": {\"", "\": \"", ", ",  ".\"",    "!\"", "?\""};
  for (const char* p : punct) add(p);
  for (int n = 0; n < 1000; ++n) add(std::to_string(n));
  for (const std::string& word : words) {
    add(" " + word);
    add(word);
  }
  for (int len = 2; static_cast<int>(out.size()) < size && len < 12; ++len) {
    for (const std::string& word : words) {
      if (static_cast<int>(word.size()) > len) {
        add(word.substr(0, len));
        add(" " + word.substr(0, len));
        add(word.substr(word.size() - len));
      }
    }
  }
  std::mt19937 rng(5);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  while (static_cast<int>(out.size()) < size) {  // filler: random letter runs
    std::string s;
    for (int j = 0, n = 2 + static_cast<int>(rng() % 6); j < n; ++j) {
      s += alphabet[rng() % alphabet.size()];
    }
    add(s);
  }
  return out;
}

const char* kNestedSchema = R"({"type": "object", "properties": {
  "id": {"type": "integer"}, "name": {"type": "string", "maxLength": 40},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 8},
  "owner": {"type": "object", "properties": {"first": {"type": "string"},
            "last": {"type": "string"}, "age": {"type": ["integer", "null"]}},
            "required": ["first", "last"]},
  "status": {"enum": ["active", "inactive", "pending"]},
  "scores": {"type": "array", "items": {"type": "number"}}},
  "required": ["id", "name", "owner", "status"]})";

void MaskBench(const Flags& f) {
  std::printf("%-8s %-14s %10s %9s %9s %9s %9s %8s %8s %9s\n", "vocab", "grammar", "compile_ms",
              "p50_us", "p99_us", "mean_us", "max_us", "suffixes", "states", "cache_KiB");
  for (int v : f.vocabs) {
    auto vocab = std::make_shared<TokenVocabulary>(SyntheticVocab(v), std::vector<int32_t>{2});
    const std::pair<const char*, std::string> grammars[] = {
        {"json_object", tq::structured::JsonObjectGrammar()},
        {"nested_schema", tq::structured::JsonSchemaGrammar(nlohmann::json::parse(kNestedSchema))}};
    for (const auto& [name, text] : grammars) {
      const auto t0 = Clock::now();
      auto g = std::make_shared<const CompiledGrammar>(tq::structured::ParseGrammar(text), vocab);
      const double compile_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      std::vector<double> us;
      std::vector<uint64_t> mask;
      std::vector<float> logits(static_cast<size_t>(v));
      std::mt19937 rng(42);
      for (int walk = 0; walk < f.walks; ++walk) {
        tq::structured::GrammarMatcher m(g);
        for (int step = 0; step < f.steps; ++step) {
          std::fill(logits.begin(), logits.end(), 0.0f);
          const auto s = Clock::now();
          m.FillMask(&mask);
          tq::structured::ApplyTokenMask(logits, mask);
          us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
          // A uniformly random allowed token (a random-weight model's choice).
          std::vector<int32_t> allowed;
          for (int32_t t = 0; t < v; ++t) {
            if (logits[static_cast<size_t>(t)] == 0.0f) allowed.push_back(t);
          }
          const int32_t t = allowed[rng() % allowed.size()];
          if (t == 2 || !m.AcceptToken(t)) break;
        }
      }
      double mean = 0;
      for (double x : us) mean += x;
      mean /= static_cast<double>(us.size());
      std::printf("%-8d %-14s %10.1f %9.1f %9.1f %9.1f %9.1f %8zu %8zu %9zu\n", v, name, compile_ms,
                  Percentile(us, 0.5), Percentile(us, 0.99), mean,
                  *std::max_element(us.begin(), us.end()), g->num_suffix_entries(),
                  g->num_state_masks(), g->cache_bytes() >> 10);
    }
  }
}

double DecodeRun(tq::LoadedModel& m, const Flags& f,
                 const std::shared_ptr<const CompiledGrammar>& grammar, std::mt19937& rng) {
  tq::EngineOptions o;
  o.max_num_batched_tokens = 2048;
  const auto core = tq::MakeEngineCore(o, m, nullptr);
  std::uniform_int_distribution<int32_t> id(3, m.files.config.vocab_size - 1);
  for (int b = 0; b < f.batch; ++b) {
    tq::EngineRequest r;
    r.request_id = std::to_string(b);
    r.prompt_ids.push_back(m.files.config.bos_token_id);
    for (int i = 1; i < 16; ++i) r.prompt_ids.push_back(id(rng));
    r.sampling.temperature = 1.0;
    r.sampling.seed = static_cast<uint64_t>(b);
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = f.output_tokens;
    r.sampling.grammar = grammar;
    core->AddRequest(std::move(r), std::make_shared<tq::RequestStream>(), Clock::now());
  }
  core->Step();
  const auto start = Clock::now();
  while (core->has_work()) core->Step();
  return static_cast<double>(f.batch) * (f.output_tokens - 1) /
         std::chrono::duration<double>(Clock::now() - start).count();
}

void DecodeBench(const Flags& f) {
  tq::EngineOptions o;
  o.model_dir = f.model;
  o.max_model_len = 16 + f.output_tokens + 16;
  o.kv_cache_dtype = tq::kernels::KvDtype::kF32;
  tq::LoadedModel m = tq::LoadModel(o);
  const int32_t vocab = m.files.config.vocab_size;
  auto tv = std::make_shared<TokenVocabulary>(SyntheticVocab(vocab),
                                              std::vector<int32_t>{m.files.config.eos_token_ids});
  auto grammar = std::make_shared<const CompiledGrammar>(
      tq::structured::ParseGrammar(tq::structured::JsonObjectGrammar()), tv);
  std::mt19937 rng(7);
  std::vector<double> plain, constrained;
  for (int r = 0; r < f.repeats; ++r) {
    plain.push_back(DecodeRun(m, f, nullptr, rng));
    constrained.push_back(DecodeRun(m, f, grammar, rng));
  }
  const double p = Percentile(plain, 0.5), c = Percentile(constrained, 0.5);
  std::printf(
      "decode batch %d, vocab %d, %d tokens: none %.1f tok/s, json_object %.1f tok/s, "
      "ratio %.3f\n",
      f.batch, vocab, f.output_tokens, p, c, c / p);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  if (f.model.empty()) {
    MaskBench(f);
  } else {
    DecodeBench(f);
  }
  return 0;
}
