// Weight quantization configs (JSON, configs/llama_*.json; schema in
// docs/quantization.md): a default format plus ordered per-module overrides
// selected by glob patterns on the Hugging Face module name and by layer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/quant/group_quant.h"

namespace tq::quant {

/// One override: every linear module whose name matches one of `modules`
/// (fnmatch(3) glob, `*` crossing dots, tried against both the full name
/// "model.layers.3.mlp.down_proj" and the in-layer name "mlp.down_proj") and
/// whose layer lies in `layers` (empty = all) takes the fields that are set.
/// The token embeddings and lm_head (LlamaTableModules) match only a pattern
/// that is exactly their name ("embed_tokens" / "model.embed_tokens",
/// "lm_head"), never a glob, and only in an override without `layers`.
struct QuantOverride {
  std::vector<std::string> modules;
  std::vector<std::pair<int32_t, int32_t>> layers;  // inclusive; negative = from the end
  std::optional<int32_t> bits, group_size;
  std::optional<bool> symmetric;
};

/// A parsed config. group_size -1 means one group per row (per-channel).
struct QuantConfig {
  QuantFormat defaults;  // defaults.clip_search: "clip_search" (default true), for all
  std::vector<QuantOverride> overrides;
  std::string source;  // file name, for error messages

  /// Parses JSON text; throws tq::Error "<source>: ..." on bad JSON, unknown
  /// keys, bits other than 4/8/16, a group_size that is 0 or below -1, or a
  /// malformed layer range.
  static QuantConfig Parse(const std::string& text, const std::string& source);
  /// Reads and parses a file; throws tq::Error naming it.
  static QuantConfig Load(const std::string& path);

  /// The format of one module: the defaults, then each matching override in
  /// order (later ones win field by field). group_size -1 becomes in_features.
  QuantFormat Resolve(const std::string& short_name, int32_t layer, int32_t num_layers,
                      int64_t in_features) const;
};

/// What a linear module is in its decoder layer: which weight it fills and
/// how tensor parallelism slices it.
enum class ModuleRole : uint8_t {
  kQ,
  kK,
  kV,
  kO,  // self_attn.{q,k,v,o}_proj
  kGate,
  kUp,
  kDown,  // a dense layer's mlp.*_proj
  kExpertGate,
  kExpertUp,
  kExpertDown,  // <block>.experts.E.{gate,up,down}
  kSharedGate,
  kSharedUp,
  kSharedDown,  // <block>.shared_expert.*_proj
  kTable,       // embed_tokens / lm_head
};

/// A linear module of a decoder layer, or a vocabulary table (layer -1).
struct LinearModule {
  std::string name;        // "model.layers.3.mlp.down_proj" (tensor = name + ".weight")
  std::string short_name;  // "mlp.down_proj", "mlp.experts.5.gate_proj"
  int32_t layer = 0;
  int64_t out_features = 0;
  int64_t in_features = 0;
  ModuleRole role = ModuleRole::kTable;
  int32_t expert = -1;  // routed experts: the expert's index
};

/// The linear modules of every layer, in checkpoint order: q, k, v, o, then
/// a dense layer's gate, up, down, or a sparse layer's (MoeConfig::Sparse)
/// experts' gate, up and down (each expert in turn; short names
/// "<block>.experts.E.<proj>", so quantization patterns such as
/// "mlp.experts.*.gate_proj" or "block_sparse_moe.experts.*.w1" select them)
/// and the shared expert's. Routers and the shared-expert gate are not
/// linear modules here: they stay fp32. embed_tokens, lm_head and the norms
/// are not included (LlamaTableModules; norms stay fp32).
std::vector<LinearModule> LlamaLinearModules(const ModelConfig& config);

/// Plan key and module name of the token embeddings ([vocab, hidden]).
inline constexpr const char* kEmbedTokensModule = "model.embed_tokens";
/// Plan key and module name of an untied lm_head ([vocab, hidden]).
inline constexpr const char* kLmHeadModule = "lm_head";

/// The vocabulary tables (layer -1): model.embed_tokens, and lm_head unless
/// tie_word_embeddings (then the one table serves both uses, and an override
/// naming "lm_head" sets its format too).
std::vector<LinearModule> LlamaTableModules(const ModelConfig& config);

/// Resolves every linear module's format and checks it against the module's
/// shape (CheckFormat). The tables (LlamaTableModules) start 16-bit (the
/// top-level bits apply to linear modules only; group_size and symmetric are
/// the defaults) and take the fields of each override that names them; the
/// plan holds an entry for a table only when it ends up int8/int4. Throws tq::Error "<source>:
/// <module>: ..." for a bad format and "<source>: override N (<patterns>) matches no module" for an
/// override that selects nothing (a typo would otherwise pass silently).
std::map<std::string, QuantFormat> PlanFormats(const QuantConfig& config, const ModelConfig& model);

/// A config that lists every module explicitly (one override per module,
/// full names), as `tqserve quantize --config-out` writes it; `comment` goes
/// into its "description".
std::string PerModuleConfigJson(const std::map<std::string, QuantFormat>& formats,
                                const std::string& comment);

/// Parameter-weighted average BitsPerWeight over the given modules.
double AverageBits(const std::vector<LinearModule>& modules,
                   const std::map<std::string, QuantFormat>& formats);

}  // namespace tq::quant
