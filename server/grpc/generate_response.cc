// Generate's stream messages (see generate_response.h).
#include "server/grpc/generate_response.h"

#include <algorithm>
#include <cstdio>
#include <span>
#include <string_view>

namespace tq::grpc_api {

std::string TokenBytes(const Tokenizer& tokenizer, int32_t token) {
  const std::string piece = tokenizer.IdToPiece(token);
  unsigned byte = 0;
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' &&
      std::sscanf(piece.c_str() + 3, "%2x", &byte) == 1) {
    return std::string(1, static_cast<char>(byte));
  }
  static constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
      out += ' ';
      i += kSpaceMark.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

GenerateResponder::GenerateResponder(const Tokenizer& tokenizer, std::string id,
                                     const GenerateParams& params)
    : tokenizer_(tokenizer),
      id_(std::move(id)),
      prompt_ids_(params.request.prompt_ids),
      stop_(params.stop),
      stop_token_ids_(params.request.sampling.stop_token_ids),
      want_logprobs_(params.want_logprobs),
      text_(&tokenizer, params.request.prompt_ids, params.stop) {}

bool GenerateResponder::Add(EngineOutput&& output, tqserve::v1::GenerateResponse* message) {
  message->Clear();
  message->set_id(id_);
  if (finished_) return false;
  std::string text;
  for (size_t i = 0; i < output.token_ids.size() && !text_.stopped(); ++i) {
    const int32_t token = output.token_ids[i];
    generated_.push_back(token);
    message->add_token_ids(token);
    if (want_logprobs_ && i < output.logprobs.size()) AddLogprobs(output.logprobs[i], message);
    text += text_.Push(std::span<const int32_t>(&token, 1));
  }
  if (text_.stopped()) {
    emitted_bytes_ += text.size();
    message->set_text(std::move(text));
    message->set_stop_string(MatchedStopString());
    Finish(tqserve::v1::FINISH_REASON_STOP, message);
    return true;
  }
  if (output.finished()) text += text_.Finish();
  emitted_bytes_ += text.size();
  message->set_text(std::move(text));
  if (!output.finished()) return !message->text().empty() || message->token_ids_size() > 0;
  if (output.finish == FinishReason::kLength) {
    Finish(tqserve::v1::FINISH_REASON_LENGTH, message);
    return true;
  }
  // kStop: EOS, or one of stop_token_ids (vLLM's stop_reason is then that id).
  if (!generated_.empty() && std::find(stop_token_ids_.begin(), stop_token_ids_.end(),
                                       generated_.back()) != stop_token_ids_.end()) {
    message->set_stop_token_id(generated_.back());
  }
  Finish(tqserve::v1::FINISH_REASON_STOP, message);
  return true;
}

void GenerateResponder::AddLogprobs(const PositionLogprobs& lp,
                                    tqserve::v1::GenerateResponse* message) const {
  const auto fill = [this](const TokenLogprob& from, tqserve::v1::TokenLogprob* to) {
    to->set_token_id(from.token);
    to->set_logprob(from.logprob);
    to->set_token(TokenBytes(tokenizer_, from.token));
  };
  tqserve::v1::PositionLogprobs* position = message->add_logprobs();
  fill(lp.chosen, position->mutable_chosen());
  for (const TokenLogprob& top : lp.top) fill(top, position->add_top_logprobs());
}

void GenerateResponder::Finish(tqserve::v1::FinishReason reason,
                               tqserve::v1::GenerateResponse* message) {
  finished_ = true;
  message->set_finish_reason(reason);
  tqserve::v1::Usage* usage = message->mutable_usage();
  usage->set_prompt_tokens(prompt_tokens());
  usage->set_completion_tokens(completion_tokens());
  usage->set_total_tokens(prompt_tokens() + completion_tokens());
}

std::string GenerateResponder::MatchedStopString() const {
  // The stop string starts right after the text sent (OutputTextStream cuts
  // there); when several start there, the shortest completed first.
  std::vector<int32_t> all = prompt_ids_;
  all.insert(all.end(), generated_.begin(), generated_.end());
  const std::string whole = tokenizer_.Decode(all);
  const size_t prompt_bytes = std::min(tokenizer_.Decode(prompt_ids_).size(), whole.size());
  const std::string full = whole.substr(prompt_bytes);
  const std::string* best = nullptr;
  for (const std::string& s : stop_) {
    if (full.compare(std::min(emitted_bytes_, full.size()), s.size(), s) == 0 &&
        (best == nullptr || s.size() < best->size())) {
      best = &s;
    }
  }
  return best != nullptr ? *best : std::string();
}

}  // namespace tq::grpc_api
