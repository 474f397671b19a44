// Fuzz target: a weight quantization config (docs/quantization.md) as
// `tqserve quantize --config` reads it (engine/quant/quant_config.h):
// QuantConfig::Parse, then PlanFormats against the bundled model's layers and
// the per-module config written back. Bad input must end in tq::Error,
// nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/common/error.h"
#include "engine/quant/quant_config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const quant::QuantConfig config = quant::QuantConfig::Parse(text, "fuzz.json");
    const auto formats = quant::PlanFormats(config, fuzz::BundledFiles().config);
    (void)quant::PerModuleConfigJson(formats, "fuzz");
    (void)quant::AverageBits(quant::LlamaLinearModules(fuzz::BundledFiles().config), formats);
  } catch (const Error& e) {
    fuzz::Expected(e);
  } catch (const std::exception& e) {
    fuzz::Unexpected("QuantConfig", e);
  }
  return 0;
}
