// Tool-call output parsers (see tool_calls.h).
#include "server/text/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/common/json_limits.h"

namespace tq {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

std::string_view Trim(std::string_view s) {
  const size_t b = SkipSpace(s, 0);
  size_t e = s.size();
  while (e > b && IsSpace(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool OnlySpace(std::string_view s) {
  return SkipSpace(s, 0) == s.size();
}

// The marker a call may start with anywhere in the reply, and the first
// character of a reply that is nothing but calls ('\0': none).
std::string_view MarkerOf(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return kHermesOpen;
    case ToolCallFormat::kLlama3Json:
      return kPythonTag;
    case ToolCallFormat::kMistral:
      return kMistralMarker;
    case ToolCallFormat::kNone:
      break;
  }
  return {};
}

char LeadOf(ToolCallFormat f) {
  if (f == ToolCallFormat::kLlama3Json) return '{';
  if (f == ToolCallFormat::kMistral) return '[';
  return '\0';
}

// Where the call part of `text` starts: the marker's first occurrence, or 0
// when the reply starts (after whitespace) with the format's lead character;
// npos when there is none.
size_t CallStart(ToolCallFormat f, std::string_view text) {
  const char lead = LeadOf(f);
  if (lead != '\0') {
    const size_t first = SkipSpace(text, 0);
    if (first < text.size() && text[first] == lead) return 0;
  }
  const std::string_view marker = MarkerOf(f);
  return marker.empty() ? std::string_view::npos : text.find(marker);
}

// The end of the JSON object or array starting at s[i] ('{' or '['): brackets
// balanced outside strings. npos when it does not close.
size_t JsonValueEnd(std::string_view s, size_t i) {
  JsonBracketScan scan;
  return scan.Run(s, i);
}

// Model output parsed as JSON under the bounds of client JSON text (a model
// can write "[[[[..." as well as a client can): over them, not JSON.
ojson ParseOutputJson(std::string_view text) {
  try {
    return ParseJsonBounded<ojson>(text, "tool call", kMaxJsonTextBytes);
  } catch (const JsonLimitError&) {
    return ojson(ojson::value_t::discarded);
  }
}

// {"name": str, "arguments"|"parameters": object | JSON text of an object}.
std::optional<ParsedToolCall> CallFromJson(const ojson& v) {
  if (!v.is_object()) return std::nullopt;
  const auto name = v.find("name");
  if (name == v.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  auto args = v.find("arguments");
  if (args == v.end()) args = v.find("parameters");
  ojson arguments = ojson::object();
  if (args != v.end()) {
    arguments = *args;
    if (arguments.is_string()) {
      arguments = ParseOutputJson(args->get<std::string>());
    }
    if (!arguments.is_object()) return std::nullopt;
  }
  return ParsedToolCall{name->get<std::string>(), arguments.dump()};
}

std::optional<ParsedToolCall> CallFromText(std::string_view text) {
  const ojson v = ParseOutputJson(Trim(text));
  if (v.is_discarded()) return std::nullopt;
  return CallFromJson(v);
}

// `<tool_call>BODY</tool_call>` blocks; the last may be unterminated.
bool ParseHermes(std::string_view s, std::vector<ParsedToolCall>* calls) {
  size_t i = s.find(kHermesOpen);
  while (i != std::string_view::npos) {
    const size_t body = i + kHermesOpen.size();
    const size_t close = s.find(kHermesClose, body);
    const std::string_view text =
        s.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    auto call = CallFromText(text);
    if (!call) return false;
    calls->push_back(std::move(*call));
    if (close == std::string_view::npos) break;
    i = s.find(kHermesOpen, close + kHermesClose.size());
  }
  return !calls->empty();
}

// `{...}; {...}` (Llama 3) or `[{...}, ...]` (Mistral), optionally after the
// format's marker, and nothing else but whitespace.
bool ParseJsonCalls(ToolCallFormat f, std::string_view s, std::vector<ParsedToolCall>* calls) {
  size_t i = SkipSpace(s, 0);
  const std::string_view marker = MarkerOf(f);
  if (s.substr(i, marker.size()) == marker) i = SkipSpace(s, i + marker.size());
  while (i < s.size()) {
    if (s[i] != '{' && s[i] != '[') return false;
    const size_t end = JsonValueEnd(s, i);
    if (end == std::string_view::npos) return false;
    const ojson v = ParseOutputJson(s.substr(i, end - i));
    if (v.is_discarded()) return false;
    if (v.is_array()) {
      if (v.empty()) return false;
      for (const ojson& item : v) {
        auto call = CallFromJson(item);
        if (!call) return false;
        calls->push_back(std::move(*call));
      }
    } else {
      auto call = CallFromJson(v);
      if (!call) return false;
      calls->push_back(std::move(*call));
    }
    i = SkipSpace(s, end);
    if (i < s.size() && s[i] == ';') i = SkipSpace(s, i + 1);
  }
  return !calls->empty();
}

// The longest proper prefix of `marker` that `text` ends with.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// The start of a Hermes call body, `{"name": "..."`, read from s[i]: kMore
// while it may still complete, kNo when the body is something else; *args
// is the position after the name.
enum class Head : uint8_t { kOk, kMore, kNo };

// Expects `lit` at s[*i] after whitespace; kMore when s ends inside it.
Head Expect(std::string_view s, size_t* i, std::string_view lit) {
  *i = SkipSpace(s, *i);
  const std::string_view have = s.substr(*i, lit.size());
  if (have != lit.substr(0, have.size())) return Head::kNo;
  if (have.size() < lit.size()) return Head::kMore;
  *i += lit.size();
  return Head::kOk;
}

Head ReadHead(std::string_view s, size_t i, std::string* name, size_t* args) {
  Head h;
  if ((h = Expect(s, &i, "{")) != Head::kOk) return h;
  if ((h = Expect(s, &i, "\"name\"")) != Head::kOk) return h;
  if ((h = Expect(s, &i, ":")) != Head::kOk) return h;
  if ((h = Expect(s, &i, "\"")) != Head::kOk) return h;
  const size_t open = i - 1;
  for (; i < s.size() && s[i] != '"'; ++i) {
    if (s[i] == '\\') ++i;
  }
  if (i >= s.size()) return Head::kMore;
  const ojson v = ParseOutputJson(s.substr(open, i + 1 - open));
  if (!v.is_string() || v.get<std::string>().empty()) return Head::kNo;
  *name = v.get<std::string>();
  *args = i + 1;
  return Head::kOk;
}

// After the name: `, "arguments": {` (or "parameters") from s[i]; *args is
// the position of the arguments' `{`.
Head ReadArgsStart(std::string_view s, size_t i, size_t* args) {
  Head h;
  if ((h = Expect(s, &i, ",")) != Head::kOk) return h;
  i = SkipSpace(s, i);
  const std::string_view key = s.substr(i, 1) == "\"" && s.substr(i + 1, 1) == "p"
                                   ? std::string_view("\"parameters\"")
                                   : std::string_view("\"arguments\"");
  if ((h = Expect(s, &i, key)) != Head::kOk) return h;
  if ((h = Expect(s, &i, ":")) != Head::kOk) return h;
  i = SkipSpace(s, i);
  if (i >= s.size()) return Head::kMore;
  if (s[i] != '{') return Head::kNo;
  *args = i;
  return Head::kOk;
}

}  // namespace

size_t JsonBracketScan::Run(std::string_view s, size_t from) {
  for (size_t i = from; i < s.size(); ++i) {
    const int step = JsonBracketStep(s[i], &in_string, &escape);
    if (step > 0) deepest = std::max(deepest, ++depth);
    if (step < 0 && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

bool TemplateUsesTools(std::string_view source) {
  // The identifier `tools` (not part of a longer name such as builtin_tools).
  const auto ident = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  for (size_t i = source.find("tools"); i != std::string_view::npos;
       i = source.find("tools", i + 1)) {
    const bool before = i > 0 && ident(source[i - 1]);
    const bool after = i + 5 < source.size() && ident(source[i + 5]);
    if (!before && !after) return true;
  }
  return false;
}

ToolCallFormat ToolCallFormatForTemplate(std::string_view source) {
  if (!TemplateUsesTools(source)) return ToolCallFormat::kNone;
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (source.find(kPythonTag) != std::string_view::npos ||
      (source.find("<|start_header_id|>") != std::string_view::npos &&
       source.find("parameters") != std::string_view::npos)) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

ParsedToolOutput ParseToolCalls(ToolCallFormat format, std::string_view text) {
  ParsedToolOutput out;
  const size_t start = CallStart(format, text);
  if (start != std::string_view::npos) {
    const std::string_view rest = text.substr(start);
    const bool ok = format == ToolCallFormat::kHermes ? ParseHermes(rest, &out.calls)
                                                      : ParseJsonCalls(format, rest, &out.calls);
    if (ok) {
      const std::string_view before = text.substr(0, start);
      if (!OnlySpace(before)) out.content = std::string(before);
      return out;
    }
    out.calls.clear();
  }
  out.content = std::string(text);
  return out;
}

std::string ToolCallStreamParser::Feed(std::string_view delta) {
  text_ += delta;
  if (holding_ || format_ == ToolCallFormat::kNone) {
    if (format_ != ToolCallFormat::kNone) {
      Scan();
      return "";
    }
    std::string out = text_.substr(released_);
    released_ = text_.size();
    return out;
  }
  const std::string_view text = text_;
  size_t limit = text.size();  // release text_[released_, limit)
  const size_t start = CallStart(format_, text);
  if (start != std::string_view::npos) {
    holding_ = true;
    limit = start;
    scan_ = start;
    Scan();
  } else {
    limit -= PartialMarkerSuffix(text, MarkerOf(format_));
    // A reply that is all whitespace so far may still turn out to be calls
    // only (the lead-character forms), and content ends before the
    // whitespace in front of a call: hold trailing whitespace.
    while (limit > released_ && IsSpace(text[limit - 1])) --limit;
  }
  while (limit > released_ && IsSpace(text[limit - 1])) --limit;
  if (limit <= released_) return "";
  std::string out(text.substr(released_, limit - released_));
  released_ = limit;
  return out;
}

bool ToolCallStreamParser::NextJsonCall(const std::string_view s) {
  size_t i = SkipSpace(s, scan_);
  if (block_ == Block::kOutside) {
    // The call part starts at scan_: an optional marker, then (Mistral) the
    // list's `[`.
    const std::string_view marker = MarkerOf(format_);
    const std::string_view have = s.substr(i, marker.size());
    if (have.size() < marker.size() && have == marker.substr(0, have.size())) return false;
    if (have == marker) i = SkipSpace(s, i + marker.size());
    if (format_ == ToolCallFormat::kMistral) {
      if (i >= s.size()) return false;
      if (s[i] != '[') {
        block_ = Block::kOpaque;
        return false;
      }
      i = SkipSpace(s, i + 1);
    }
  } else {
    // After a call object: Llama 3 separates calls with `;` (or nothing),
    // Mistral's list goes on with `,` or closes with `]`.
    if (i >= s.size()) return false;
    const char sep = format_ == ToolCallFormat::kMistral ? ',' : ';';
    if (format_ == ToolCallFormat::kMistral && s[i] == ']') {
      block_ = Block::kDone;
      return false;
    }
    if (s[i] == sep) {
      i = SkipSpace(s, i + 1);
    } else if (format_ == ToolCallFormat::kMistral) {
      block_ = Block::kOpaque;
      return false;
    }
  }
  if (i >= s.size()) return false;  // rescanned from scan_ when more comes
  if (s[i] != '{') {
    block_ = Block::kOpaque;
    return false;
  }
  body_ = i;
  block_ = Block::kHead;
  return true;
}

void ToolCallStreamParser::Scan() {
  const std::string_view s = text_;
  const bool hermes = format_ == ToolCallFormat::kHermes;
  for (;;) {
    switch (block_) {
      case Block::kOutside:
      case Block::kBetween: {
        if (!hermes) {
          if (!NextJsonCall(s)) return;
          break;
        }
        const size_t open = s.find(kHermesOpen, scan_);
        if (open == std::string_view::npos) return;
        body_ = open + kHermesOpen.size();
        block_ = Block::kHead;
        break;
      }
      case Block::kHead: {
        std::string name;
        const Head h = ReadHead(s, body_, &name, &args_pos_);
        if (h == Head::kMore) return;
        if (h == Head::kNo) {
          block_ = Block::kOpaque;  // left to Finish()
          return;
        }
        pieces_.push_back({calls_started_++, std::move(name), ""});
        args_sent_ = false;
        block_ = Block::kArgsStart;
        break;
      }
      case Block::kArgsStart: {
        const Head h = ReadArgsStart(s, args_pos_, &args_pos_);
        if (h == Head::kMore) return;
        if (h == Head::kNo) {
          block_ = Block::kOpaque;  // left to Finish()
          return;
        }
        brackets_ = JsonBracketScan{};
        block_ = Block::kArgs;
        break;
      }
      case Block::kArgs: {
        const size_t from = args_pos_;
        const size_t end = brackets_.Run(s, from);
        args_pos_ = end == std::string_view::npos ? s.size() : end;
        if (args_pos_ > from) {
          pieces_.push_back(
              {calls_started_ - 1, "", std::string(s.substr(from, args_pos_ - from))});
          args_sent_ = true;
        }
        if (end == std::string_view::npos) return;
        // The call object itself is still open (depth 1).
        brackets_ = JsonBracketScan{1, false, false};
        block_ = Block::kAfterArgs;
        break;
      }
      case Block::kAfterArgs: {
        if (hermes) {
          const size_t close = s.find(kHermesClose, args_pos_);
          if (close == std::string_view::npos) return;
          scan_ = close + kHermesClose.size();
          block_ = Block::kOutside;
          break;
        }
        const size_t end = brackets_.Run(s, args_pos_);
        if (end == std::string_view::npos) {
          args_pos_ = s.size();
          return;
        }
        scan_ = end;
        block_ = Block::kBetween;
        break;
      }
      case Block::kOpaque:
      case Block::kDone:
        return;
    }
  }
}

ParsedToolOutput ToolCallStreamParser::Finish() {
  ParsedToolOutput out = ParseToolCalls(format_, text_);
  if (calls_started_ > 0) {
    // Calls already streamed: no content after them; queue the calls the
    // scan did not stream (an opaque block), and the whole arguments of a
    // streamed call whose arguments never appeared.
    if (out.calls.empty()) out.content.reset();
    const auto started = static_cast<size_t>(calls_started_);
    if (!args_sent_ && out.calls.size() >= started) {
      pieces_.push_back({calls_started_ - 1, "", out.calls[started - 1].arguments});
    }
    for (size_t k = started; k < out.calls.size(); ++k) {
      pieces_.push_back({calls_started_, out.calls[k].name, ""});
      pieces_.push_back({calls_started_++, "", out.calls[k].arguments});
    }
  } else {
    for (const ParsedToolCall& call : out.calls) {
      pieces_.push_back({calls_started_, call.name, ""});
      pieces_.push_back({calls_started_++, "", call.arguments});
    }
  }
  if (out.content) {
    // What was released is always a prefix of the content (see Feed).
    out.content = out.content->substr(std::min(released_, out.content->size()));
    if (out.content->empty() && !out.calls.empty()) out.content.reset();
  }
  return out;
}

std::vector<ToolCallPiece> ToolCallStreamParser::TakePieces() {
  std::vector<ToolCallPiece> out;
  out.swap(pieces_);
  return out;
}

}  // namespace tq
