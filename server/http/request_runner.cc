// Runs one API request's choices on the engine (see request_runner.h).
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

}  // namespace

struct RequestRunner::Choice {
  Choice(ChoiceSpec s, const Tokenizer& tokenizer, const std::vector<std::string>& stop)
      : spec(std::move(s)), text(&tokenizer, spec.request.prompt_ids, stop) {}

  ChoiceSpec spec;
  std::shared_ptr<RequestStream> stream;
  OutputTextStream text;
  bool started = false;            // an output was handled (echo sent)
  bool finished = false;           // no more deltas; the engine request is done or aborted
  int64_t emitted_chars = 0;       // code points of this choice's text so far (echo included)
  size_t generated_bytes = 0;      // bytes of generated text emitted (echo excluded)
  std::vector<int32_t> generated;  // tokens pushed into `text`
  int32_t completion_tokens = 0;
};

RequestRunner::RequestRunner(EngineCalls engine, const Tokenizer& tokenizer,
                             std::vector<ChoiceSpec> choices, std::vector<std::string> stop,
                             bool want_logprobs)
    : engine_(std::move(engine)),
      tokenizer_(tokenizer),
      stop_(std::move(stop)),
      want_logprobs_(want_logprobs) {
  choices_.reserve(choices.size());
  for (ChoiceSpec& spec : choices) {
    choices_.push_back(std::make_unique<Choice>(std::move(spec), tokenizer_, stop_));
  }
}

RequestRunner::~RequestRunner() {
  AbortAll();
}

void RequestRunner::Submit() {
  for (auto& c : choices_) {
    try {
      c->stream = engine_.submit(c->spec.request);
    } catch (...) {
      AbortAll();
      throw;
    }
  }
}

bool RequestRunner::done() const {
  if (error_) return true;
  return std::all_of(choices_.begin(), choices_.end(), [](const auto& c) { return c->finished; });
}

void RequestRunner::AbortAll() {
  for (auto& c : choices_) {
    if (!c->finished && c->stream) engine_.abort(c->spec.request.request_id, FinishReason::kAbort);
    c->finished = true;
  }
}

void RequestRunner::Fail(ApiError error) {
  if (!error_) error_ = std::move(error);
  AbortAll();
}

Usage RequestRunner::usage() const {
  Usage usage;
  std::vector<int32_t> counted;  // prompt indexes already counted
  for (const auto& c : choices_) {
    if (std::find(counted.begin(), counted.end(), c->spec.prompt_index) == counted.end()) {
      counted.push_back(c->spec.prompt_index);
      usage.prompt_tokens += static_cast<int32_t>(c->spec.request.prompt_ids.size());
    }
    usage.completion_tokens += c->completion_tokens;
  }
  return usage;
}

std::vector<ChoiceDelta> RequestRunner::Poll(std::chrono::milliseconds timeout) {
  std::vector<ChoiceDelta> deltas;
  std::vector<Choice*> live;
  for (auto& c : choices_) {
    if (!c->finished) live.push_back(c.get());
  }
  if (error_ || live.empty()) return deltas;
  const auto take = [&](Choice& c, std::chrono::milliseconds wait) {
    std::optional<EngineOutput> out = c.stream->Next(wait);
    if (!out) return false;
    ChoiceDelta delta;
    delta.index = c.spec.index;
    Handle(c, std::move(*out), delta);
    if (!delta.text.empty() || !delta.logprobs.empty() || delta.finished()) {
      deltas.push_back(std::move(delta));
    }
    return true;
  };
  if (live.size() == 1) {
    take(*live.front(), timeout);
  } else {
    // RequestStream has no wait-for-any: poll all, then wait briefly on one
    // (the choices of a request usually advance in the same engine step).
    bool any = false;
    for (Choice* c : live) {
      if (!error_) any |= take(*c, std::chrono::milliseconds(0));
    }
    if (!any && !error_) take(*live.front(), std::min(timeout, std::chrono::milliseconds(5)));
  }
  if (error_) deltas.clear();
  return deltas;
}

void RequestRunner::Handle(Choice& c, EngineOutput&& out, ChoiceDelta& delta) {
  if (out.finish == FinishReason::kError) {
    c.finished = true;
    Fail(InternalError("the engine failed: " + out.error));
    return;
  }
  if (out.finish == FinishReason::kAbort) {
    // Our own aborts (stop string, disconnect) are never read back, so this
    // one came from the server: the drain timeout or shutdown.
    c.finished = true;
    Fail(Unavailable("the request was aborted: the server is shutting down"));
    return;
  }
  if (!c.started) {
    c.started = true;
    if (c.spec.echo) {
      const std::vector<int32_t>& prompt = c.spec.request.prompt_ids;
      if (want_logprobs_) {
        // Offsets of the prompt tokens in the echoed text (OpenAI: the first
        // prompt token has no logprob, "null").
        IncrementalDetokenizer detok(&tokenizer_, {});
        int64_t offset = 0;
        for (size_t i = 0; i < prompt.size(); ++i) {
          LogprobEntry entry{prompt[i], std::nullopt, {}, offset};
          if (i > 0 && i - 1 < out.prompt_logprobs.size()) {
            entry.logprob = out.prompt_logprobs[i - 1].chosen.logprob;
            entry.top = out.prompt_logprobs[i - 1].top;
          }
          delta.logprobs.push_back(std::move(entry));
          offset += CodePoints(detok.Push(prompt[i]));
        }
      }
      delta.text += c.spec.echo_text;
      c.emitted_chars += CodePoints(c.spec.echo_text);
    }
  }
  for (size_t i = 0; i < out.token_ids.size() && !c.text.stopped(); ++i) {
    PushToken(c, out.token_ids[i], i < out.logprobs.size() ? &out.logprobs[i] : nullptr, delta);
  }
  if (c.text.stopped()) {
    c.finished = true;
    engine_.abort(c.spec.request.request_id, FinishReason::kStop);
    c.completion_tokens = c.text.num_tokens();
    delta.finish_reason = "stop";
    // The matched stop string starts right after the emitted text; when two
    // match there, the shorter one completed first.
    const std::vector<int32_t>& prompt = c.spec.request.prompt_ids;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), c.generated.begin(), c.generated.end());
    const std::string full = tokenizer_.Decode(all).substr(tokenizer_.Decode(prompt).size());
    for (const std::string& s : stop_) {
      if (full.compare(std::min(c.generated_bytes, full.size()), s.size(), s) == 0 &&
          (delta.stop_reason.is_null() || s.size() < delta.stop_reason.get<std::string>().size())) {
        delta.stop_reason = s;
      }
    }
    return;
  }
  c.completion_tokens = out.num_output_tokens;
  if (!out.finished()) return;
  const std::string tail = c.text.Finish();
  delta.text += tail;
  c.emitted_chars += CodePoints(tail);
  c.finished = true;
  delta.finish_reason = out.finish == FinishReason::kLength ? "length" : "stop";
  const std::vector<int32_t>& stop_ids = c.spec.request.sampling.stop_token_ids;
  if (out.finish == FinishReason::kStop && !c.generated.empty() &&
      std::find(stop_ids.begin(), stop_ids.end(), c.generated.back()) != stop_ids.end()) {
    delta.stop_reason = c.generated.back();
  }
}

void RequestRunner::PushToken(Choice& c, int32_t token, const PositionLogprobs* lp,
                              ChoiceDelta& delta) {
  if (want_logprobs_ && lp != nullptr) {
    delta.logprobs.push_back(LogprobEntry{token, lp->chosen.logprob, lp->top, c.emitted_chars});
  }
  c.generated.push_back(token);
  const std::string text = c.text.Push(std::span<const int32_t>(&token, 1));
  delta.text += text;
  c.emitted_chars += CodePoints(text);
  c.generated_bytes += text.size();
}

}  // namespace tq::http
