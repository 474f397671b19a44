// Raw request parsing of the gRPC service (server/grpc/wire_request.h):
// DescribeWireFault finds a fault exactly when libprotobuf's own parser (the
// independent oracle) rejects the bytes, over every truncation and every
// single-byte corruption of real encoded requests; ParseRequest's
// INVALID_ARGUMENT messages name the field.
#include <google/protobuf/message.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "server/grpc/grpc_status.h"
#include "server/grpc/wire_request.h"
#include "tqserve/v1/generation.pb.h"

namespace tq::grpc_api {
namespace {

namespace pb = tqserve::v1;

pb::GenerateRequest RichRequest() {
  pb::GenerateRequest r;
  r.set_model("stories260K");
  r.set_text("Once upon a time, naïve café");
  r.set_add_special_tokens(false);
  pb::SamplingParameters* s = r.mutable_sampling();
  s->set_temperature(0.7);
  s->set_top_k(40);
  s->set_seed(-5);
  s->set_max_tokens(300);
  s->add_stop("Lily");
  s->add_stop_token_ids(2);
  s->add_stop_token_ids(13);
  s->set_logprobs(3);
  s->mutable_structured_output()->mutable_choice()->add_choices("yes");
  r.set_priority(-1);
  return r;
}

// Whether libprotobuf parses `bytes` as a `prototype` message.
bool Parses(const google::protobuf::Message& prototype, const std::string& bytes) {
  std::unique_ptr<google::protobuf::Message> m(prototype.New());
  return m->ParseFromString(bytes);
}

// Whether two different members of one oneof (not a proto3 `optional`) are
// set in `bytes`, at any level, as libprotobuf's UnknownFieldSet reads them.
bool TwoOneofMembers(const std::string& bytes, const google::protobuf::Descriptor& type) {
  google::protobuf::UnknownFieldSet set;
  if (!set.ParseFromString(bytes)) return false;
  std::map<const google::protobuf::OneofDescriptor*, int> seen;
  for (int i = 0; i < set.field_count(); ++i) {
    const google::protobuf::UnknownField& f = set.field(i);
    const google::protobuf::FieldDescriptor* field = type.FindFieldByNumber(f.number());
    if (field == nullptr) continue;
    if (const auto* oneof = field->real_containing_oneof()) {
      const auto [it, fresh] = seen.emplace(oneof, f.number());
      if (!fresh && it->second != f.number()) return true;
    }
    if (field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE &&
        f.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
        TwoOneofMembers(f.length_delimited(), *field->message_type())) {
      return true;
    }
  }
  return false;
}

// The oracle: libprotobuf parses the bytes, and no oneof has two members
// (docs/grpc.md: exactly one of text and token_ids; libprotobuf itself would
// keep the last one).
void ExpectAgreesWithLibprotobuf(const google::protobuf::Message& prototype,
                                 const std::string& bytes) {
  const std::string fault = DescribeWireFault(bytes, *prototype.GetDescriptor());
  EXPECT_EQ(Parses(prototype, bytes) && !TwoOneofMembers(bytes, *prototype.GetDescriptor()),
            fault.empty())
      << "fault '" << fault << "' for " << bytes.size() << " bytes";
}

TEST(GrpcWire, FaultsExactlyWhenLibprotobufRejectsTruncationsAndCorruptions) {
  const pb::GenerateRequest request = RichRequest();
  const std::string bytes = request.SerializeAsString();
  ASSERT_TRUE(DescribeWireFault(bytes, *pb::GenerateRequest::descriptor()).empty());
  for (size_t n = 0; n <= bytes.size(); ++n)
    ExpectAgreesWithLibprotobuf(request, bytes.substr(0, n));
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (const unsigned char v : {0x00, 0x07, 0x0f, 0x80, 0xff, 0xc3}) {
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(v);
      ExpectAgreesWithLibprotobuf(request, corrupt);
    }
  }
  pb::DetokenizeRequest detok;
  detok.add_token_ids(1);
  detok.add_token_ids(403);
  const std::string d = detok.SerializeAsString();
  for (size_t n = 0; n <= d.size(); ++n) ExpectAgreesWithLibprotobuf(detok, d.substr(0, n));
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string ParseError(const std::string& bytes, google::protobuf::Message* message) {
  try {
    ParseRequest(Buffer(bytes), message);
  } catch (const RpcError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    return e.what();
  }
  return "";
}

TEST(GrpcWire, ParseRequestNamesTheFieldAndTheFault) {
  pb::GenerateRequest g;
  EXPECT_EQ(ParseError(std::string("\x2a\x02\x48\xff", 4), &g),
            "malformed GenerateRequest: sampling.max_tokens (field 9): truncated or over-long "
            "varint at byte 2");
  EXPECT_EQ(ParseError(std::string("\x12\x05Hi", 4), &g),
            "malformed GenerateRequest: text (field 2): length 5 runs past the end of the "
            "message (2 bytes left) at byte 0");
  EXPECT_EQ(ParseError(std::string("\x0a\x02\xc3\x28", 4), &g),
            "malformed GenerateRequest: model (field 1): string is not valid UTF-8 at byte 0");
  pb::TokenizeRequest t;
  EXPECT_EQ(ParseError(std::string("\x0f", 1), &t),
            "malformed TokenizeRequest: model (field 1): invalid wire type 7 at byte 0");
  EXPECT_EQ(ParseError(std::string("\x00", 1), &t),
            "malformed TokenizeRequest: field number 0 is invalid at byte 0");
  // Valid bytes parse; in several slices too.
  const std::string bytes = RichRequest().SerializeAsString();
  EXPECT_EQ(ParseError(bytes, &g), "");
  EXPECT_EQ(g.SerializeAsString(), bytes);
  grpc::Slice parts[] = {grpc::Slice(bytes.substr(0, 7)), grpc::Slice(bytes.substr(7))};
  pb::GenerateRequest g2;
  ParseRequest(grpc::ByteBuffer(parts, 2), &g2);
  EXPECT_EQ(g2.SerializeAsString(), bytes);
  // An empty body is the empty message.
  EXPECT_EQ(ParseError("", &t), "");
}

// Issue 41: text and token_ids together (oneof input) are INVALID_ARGUMENT,
// in either order, as are two structured_output kinds; the same member twice
// is one value (protobuf's last-one-wins), and the optional
// add_special_tokens (a synthetic oneof) is no oneof member.
TEST(GrpcWire, TwoMembersOfAOneofAreRefused) {
  pb::GenerateRequest g;
  // text "Hi" (field 2), then token_ids {ids: [5]} (field 3, packed ids).
  const std::string text = std::string("\x12\x02Hi", 4);
  const std::string ids = std::string("\x1a\x03\x0a\x01\x05", 5);
  EXPECT_EQ(ParseError(text + ids, &g),
            "malformed GenerateRequest: token_ids (field 3): set together with text; oneof input "
            "takes exactly one at byte 4");
  EXPECT_EQ(ParseError(ids + text, &g),
            "malformed GenerateRequest: text (field 2): set together with token_ids; oneof input "
            "takes exactly one at byte 5");
  EXPECT_TRUE(Parses(g, text + ids));  // what libprotobuf alone would accept
  EXPECT_EQ(ParseError(text + text, &g), "");
  EXPECT_EQ(g.text(), "Hi");
  pb::GenerateRequest both;
  both.set_text("Hi");
  both.set_add_special_tokens(true);
  EXPECT_EQ(ParseError(both.SerializeAsString(), &g), "");
  pb::GenerateRequest regex;
  regex.mutable_sampling()->mutable_structured_output()->set_regex("a+");
  pb::GenerateRequest grammar;
  grammar.mutable_sampling()->mutable_structured_output()->set_grammar("root ::= \"a\"");
  // Within one structured_output: refused.
  // sampling (5) { structured_output (14) { regex (3): "a+", grammar (5): "x" } }
  const std::string two_kinds = std::string("\x2a\x09\x72\x07", 4) + std::string("\x1a\x02", 2) +
                                "a+" + std::string("\x2a\x01x", 3);
  ASSERT_TRUE(Parses(g, two_kinds)) << "the hand-made bytes must be a valid encoding";
  EXPECT_NE(ParseError(two_kinds, &g).find("oneof"), std::string::npos);
  // Two sampling fields merge (protobuf's rule for a repeated message field
  // occurrence), each with one kind: kept as protobuf merges them.
  const std::string merged = regex.SerializeAsString() + grammar.SerializeAsString();
  EXPECT_EQ(ParseError(merged, &g), "");
}

}  // namespace
}  // namespace tq::grpc_api
