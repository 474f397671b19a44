// Runs one API request's choices on a RequestSession (see request_runner.h).
#include "server/http/request_runner.h"

#include <algorithm>

#include "server/text/detokenizer.h"

namespace tq::http {
namespace {

// Unicode code points in valid UTF-8 text (bytes that do not continue one).
int64_t CodePoints(const std::string& text) {
  return std::count_if(text.begin(), text.end(),
                       [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; });
}

std::vector<EngineRequest> Requests(const std::vector<ChoiceSpec>& specs) {
  std::vector<EngineRequest> requests;
  requests.reserve(specs.size());
  for (const ChoiceSpec& s : specs) requests.push_back(s.request);
  return requests;
}

}  // namespace

RequestRunner::RequestRunner(SessionEngine engine, const Tokenizer& tokenizer,
                             std::vector<ChoiceSpec> choices, std::vector<std::string> stop,
                             bool want_logprobs)
    : tokenizer_(tokenizer),
      want_logprobs_(want_logprobs),
      specs_(std::move(choices)),
      emitted_(specs_.size(), 0),
      session_(std::move(engine), tokenizer, Requests(specs_), std::move(stop)) {}

void RequestRunner::Submit() {
  session_.Submit();
}

Usage RequestRunner::usage() const {
  Usage usage;
  std::vector<int32_t> counted;  // prompt indexes already counted
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ChoiceSpec& s = specs_[i];
    if (std::find(counted.begin(), counted.end(), s.prompt_index) == counted.end()) {
      counted.push_back(s.prompt_index);
      usage.prompt_tokens += static_cast<int32_t>(s.request.prompt_ids.size());
      usage.cached_tokens += session_.cached_tokens(i);  // the prompt's first choice
    }
    usage.completion_tokens += session_.completion_tokens(i);
  }
  return usage;
}

std::vector<ChoiceDelta> RequestRunner::Take() {
  return Convert(session_.Take());
}

void RequestRunner::Echo(const ChoiceSpec& spec, const SessionDelta& d, ChoiceDelta& out,
                         int64_t& chars) const {
  const std::vector<int32_t>& prompt = spec.request.prompt_ids;
  if (want_logprobs_) {
    // Offsets of the prompt tokens in the echoed text (OpenAI: the first
    // prompt token has no logprob, "null").
    IncrementalDetokenizer detok(&tokenizer_, {});
    int64_t offset = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
      LogprobEntry entry{prompt[i], std::nullopt, {}, offset};
      if (i > 0 && i - 1 < d.prompt_logprobs.size()) {
        entry.logprob = d.prompt_logprobs[i - 1].chosen.logprob;
        entry.top = d.prompt_logprobs[i - 1].top;
      }
      out.logprobs.push_back(std::move(entry));
      offset += CodePoints(detok.Push(prompt[i]));
    }
  }
  out.text += spec.echo_text;
  chars += CodePoints(spec.echo_text);
}

std::optional<ApiError> RequestRunner::error() const {
  const auto& failure = session_.failure();
  if (!failure) return std::nullopt;
  return failure->kind == SessionFailure::Kind::kServerAborted ? Unavailable(failure->message)
                                                               : InternalError(failure->message);
}

std::vector<ChoiceDelta> RequestRunner::Convert(std::vector<SessionDelta> deltas) {
  std::vector<ChoiceDelta> out;  // none after a failure (the session sends none)
  for (SessionDelta& d : deltas) {
    const ChoiceSpec& spec = specs_[d.choice];
    int64_t& chars = emitted_[d.choice];
    ChoiceDelta delta;
    delta.index = spec.index;
    if (d.first && spec.echo) Echo(spec, d, delta, chars);
    int64_t offset = chars;  // of each token's text in the choice's text
    for (const TokenStep& t : d.tokens) {
      if (want_logprobs_ && t.logprobs) {
        delta.logprobs.push_back(
            LogprobEntry{t.id, t.logprobs->chosen.logprob, t.logprobs->top, offset});
      }
      offset += CodePoints(t.text);
    }
    chars += CodePoints(d.text);  // the tokens' text, then any held-back tail
    delta.text += d.text;
    if (d.finish == ChoiceFinish::kLength) delta.finish_reason = "length";
    if (d.finish == ChoiceFinish::kStop) {
      delta.finish_reason = "stop";
      if (!d.stop_string.empty()) delta.stop_reason = d.stop_string;
      if (d.stop_token_id) delta.stop_reason = *d.stop_token_id;
    }
    if (!delta.text.empty() || !delta.logprobs.empty() || delta.finished()) {
      out.push_back(std::move(delta));
    }
  }
  return out;
}

}  // namespace tq::http
