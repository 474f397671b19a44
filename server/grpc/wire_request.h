// Request messages of the raw (grpc::ByteBuffer) handlers: the service parses
// each request itself, so that bytes that are not a valid protobuf message
// get INVALID_ARGUMENT naming what is wrong (gRPC's own parser answers
// INTERNAL with no message, before any handler, uncounted), and serializes
// each response.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>
#include <string_view>

namespace tq::grpc_api {

/// Why `bytes` are not a valid protobuf encoding of a `type` message: the
/// first wire-format fault, with the field path (from `type`'s descriptor,
/// "sampling.max_tokens"; "field 99" for a number the type does not have) and
/// the byte offset, e.g. "sampling.max_tokens (field 9): truncated varint at
/// byte 14". Faults found: a truncated or over-long varint, a truncated
/// fixed32/fixed64, a length past the end of the enclosing message, wire
/// type 6 or 7, field number 0, an unmatched group, invalid UTF-8 in a
/// proto3 string field, two different members of one oneof in one message
/// (proto3 `optional` is no oneof here); nested messages are checked field
/// by field. "" when it finds none.
std::string DescribeWireFault(std::string_view bytes, const google::protobuf::Descriptor& type);

/// Parses the request bytes into `message` (cleared first). Throws RpcError
/// INVALID_ARGUMENT "malformed <Type>: <DescribeWireFault>" when they are
/// not a valid encoding of its type, or set two members of one oneof (which
/// libprotobuf would accept, keeping the last: "token_ids (field 3): set
/// together with text; oneof input takes exactly one").
void ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* message);

/// Serializes `message` into `out` (replacing its contents).
void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

}  // namespace tq::grpc_api
