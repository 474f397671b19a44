// Fuzz target: the JSON files of a model directory as LoadModelFiles reads
// them at start-up (engine/model/model_config.h): the input's parts
// (fuzz_common.h kPartSeparator) are config.json, generation_config.json and
// tokenizer_config.json (absent when the input has fewer parts). A loaded
// config's derived values (RoPE frequencies, per-layer tensors, context) are
// computed too. Bad input must end in tq::Error, nothing else.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "engine/common/error.h"
#include "engine/model/model_config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  static const std::string dir = [] {
    const std::string d = fuzz::ScratchPath("model");
    std::filesystem::create_directories(d);
    return d;
  }();
  const char* names[] = {"config.json", "generation_config.json", "tokenizer_config.json"};
  const std::vector<std::string_view> parts = fuzz::SplitParts(data, size, 3);
  for (size_t i = 0; i < 3; ++i) {
    const std::string path = dir + "/" + names[i];
    if (i < parts.size()) {
      fuzz::WriteFile(path, parts[i]);
    } else {
      std::filesystem::remove(path);
    }
  }
  try {
    const ModelFiles files = LoadModelFiles(dir);
    if (files.config.head_dim <= 4096) (void)files.config.RopeInvFreq();
    if (files.config.num_hidden_layers <= 4096) (void)LayerVectorTensors(files.config);
    (void)files.config.MaxContext();
  } catch (const Error& e) {
    fuzz::Expected(e);
  } catch (const std::exception& e) {
    fuzz::Unexpected("LoadModelFiles", e);
  }
  return 0;
}
