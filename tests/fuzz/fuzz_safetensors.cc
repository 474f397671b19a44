// Fuzz target: a .safetensors file as SafetensorsFile opens it at model load
// (engine/model/safetensors.h): header length, JSON header, dtypes, shapes
// and data offsets; then every small tensor is converted to fp32 as the
// weight loader does. Bad input must end in tq::Error, nothing else.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  static const std::string path = fuzz::ScratchPath("model.safetensors");
  fuzz::WriteFile(path, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const SafetensorsFile file(path);
    std::vector<float> out;
    for (const auto& [name, info] : file.tensors()) {
      const int64_t n = info.NumElements();
      if (n < 0 || n > (1 << 16)) continue;  // bounded work per input
      out.assign(static_cast<size_t>(n), 0.0f);
      info.ToFloat(out.data());
    }
  } catch (const Error& e) {
    fuzz::Expected(e);
  } catch (const std::exception& e) {
    fuzz::Unexpected("SafetensorsFile", e);
  }
  return 0;
}
