// Tokenizer encode speed: the C++ tokenizer of a model directory (tokenizer.json
// or tokenizer.model) on a text file, one thread. Prints one JSON line:
//   tq_bench_tokenizer --dir DIR --file FILE [--repeats N] [--mode whole|lines]
// whole: the file is one Encode call; lines: one call per line ("\n"-split).
// Each repeat is timed; the best is reported (MB/s of input bytes). The word
// cache is warm after the first repeat, as HF's is (bench/run_tokenizer_bench.sh
// runs HF tokenizers the same way, interleaved).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "engine/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string dir, file, mode = "whole";
  int repeats = 5;
  CLI::App app("Tokenizer encode speed on a text file, one thread.", "tq_bench_tokenizer");
  app.add_option("--dir", dir, "Model directory (tokenizer.json or tokenizer.model)")->required();
  app.add_option("--file", file, "Text file")->required();
  app.add_option("--repeats", repeats)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--mode", mode, "whole: one Encode call; lines: one per line")
      ->capture_default_str()
      ->check(CLI::IsMember({"whole", "lines"}));
  tq::bench::ParseOrExit(app, argc, argv);
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> lines;
  if (mode == "lines") {
    std::stringstream ls(text);
    for (std::string line; std::getline(ls, line);) lines.push_back(line);
  }
  tq::TokenizerSettings settings;
  settings.add_bos_token = false;
  const auto t0 = std::chrono::steady_clock::now();
  const auto tok = tq::Tokenizer::Load(dir, settings);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    tokens = 0;
    if (mode == "whole") {
      tokens = tok->Encode(text, false).size();
    } else {
      for (const std::string& line : lines) tokens += tok->Encode(line, false).size();
    }
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf(
      "{\"impl\": \"tqserve\", \"mode\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"best_s\": "
      "%.4f, "
      "\"mb_per_s\": %.2f, \"load_s\": %.3f}\n",
      mode.c_str(), text.size(), tokens, best, text.size() / best / 1e6, load_s);
  return 0;
}
