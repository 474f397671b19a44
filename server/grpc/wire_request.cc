// Parsing raw request bytes with a precise fault (see wire_request.h).
#include "server/grpc/wire_request.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "server/grpc/grpc_status.h"

namespace tq::grpc_api {
namespace {

namespace gp = google::protobuf;
using gp::io::CodedInputStream;
using WireType = gp::internal::WireFormatLite::WireType;

// A repeated varint field (int32, bool, enum, ...): its wire type 2 form
// is a packed run of varints, each checked.
bool PackedVarints(const gp::FieldDescriptor* field) {
  if (field == nullptr || !field->is_repeated()) return false;
  switch (field->type()) {
    case gp::FieldDescriptor::TYPE_INT32:
    case gp::FieldDescriptor::TYPE_INT64:
    case gp::FieldDescriptor::TYPE_UINT32:
    case gp::FieldDescriptor::TYPE_UINT64:
    case gp::FieldDescriptor::TYPE_SINT32:
    case gp::FieldDescriptor::TYPE_SINT64:
    case gp::FieldDescriptor::TYPE_BOOL:
    case gp::FieldDescriptor::TYPE_ENUM:
      return true;
    default:
      return false;
  }
}

// Walks one message's fields up to the stream's current limit; returns the
// first fault ("" when none). `prefix`: the path of the enclosing field
// ("sampling."), `type` null for a message of unknown type (a group).
std::string Walk(std::string_view bytes, CodedInputStream& in, const gp::Descriptor* type,
                 const std::string& prefix, int depth) {
  // The member of each oneof seen so far: a second, different member is a
  // fault (protobuf's parser would keep the last one silently; the API says
  // exactly one, docs/grpc.md). Proto3 `optional` (a synthetic oneof) is not one.
  std::vector<std::pair<const gp::OneofDescriptor*, const gp::FieldDescriptor*>> oneofs;
  for (;;) {
    const int at = in.CurrentPosition();
    if (in.BytesUntilLimit() == 0) return "";
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      return (bytes[static_cast<size_t>(at)] == 0 ? "field number 0 is invalid"
                                                  : "truncated or invalid field tag") +
             std::string(" at byte ") + std::to_string(at);
    }
    const int number = static_cast<int>(tag >> 3);
    const int wire = static_cast<int>(tag & 7);
    const gp::FieldDescriptor* field = type ? type->FindFieldByNumber(number) : nullptr;
    const std::string name = (field ? prefix + field->name() + " (field " : "field ") +
                             std::to_string(number) + (field ? ")" : "");
    const auto fault = [&](const std::string& what) {
      return name + ": " + what + " at byte " + std::to_string(at);
    };
    if (number == 0) return fault("field number 0 is invalid");
    if (const gp::OneofDescriptor* oneof = field ? field->real_containing_oneof() : nullptr) {
      const auto seen = std::find_if(oneofs.begin(), oneofs.end(),
                                     [&](const auto& o) { return o.first == oneof; });
      if (seen == oneofs.end()) {
        oneofs.emplace_back(oneof, field);
      } else if (seen->second != field) {
        return fault("set together with " + prefix + seen->second->name() + "; oneof " +
                     oneof->name() + " takes exactly one");
      }
    }
    switch (wire) {
      case WireType::WIRETYPE_VARINT: {
        uint64_t v = 0;
        if (!in.ReadVarint64(&v)) return fault("truncated or over-long varint");
        break;
      }
      case WireType::WIRETYPE_FIXED64: {
        uint64_t v = 0;
        if (!in.ReadLittleEndian64(&v)) return fault("truncated 64-bit value");
        break;
      }
      case WireType::WIRETYPE_FIXED32: {
        uint32_t v = 0;
        if (!in.ReadLittleEndian32(&v)) return fault("truncated 32-bit value");
        break;
      }
      case WireType::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length = 0;
        if (!in.ReadVarint32(&length)) return fault("truncated length");
        const int left = in.BytesUntilLimit();
        if (static_cast<int64_t>(length) > left) {
          return fault("length " + std::to_string(length) + " runs past the end of the message (" +
                       std::to_string(left) + " bytes left)");
        }
        const bool nested = field != nullptr && field->type() == gp::FieldDescriptor::TYPE_MESSAGE;
        const bool text = field != nullptr && field->type() == gp::FieldDescriptor::TYPE_STRING &&
                          field->file()->syntax() == gp::FileDescriptor::SYNTAX_PROTO3;
        if (nested && depth < 100) {
          const auto limit = in.PushLimit(static_cast<int>(length));
          std::string inner =
              Walk(bytes, in, field->message_type(), prefix + field->name() + ".", depth + 1);
          if (!inner.empty()) return inner;
          in.PopLimit(limit);
        } else if (PackedVarints(field)) {
          const auto limit = in.PushLimit(static_cast<int>(length));
          while (in.BytesUntilLimit() > 0) {
            const int element = in.CurrentPosition();
            uint64_t v = 0;
            if (!in.ReadVarint64(&v)) {
              return name + ": truncated or over-long varint at byte " + std::to_string(element) +
                     " (packed repeated field at byte " + std::to_string(at) + ")";
            }
          }
          in.PopLimit(limit);
        } else if (text) {
          std::string value;
          in.ReadString(&value, static_cast<int>(length));
          if (!utf8::Valid(value)) return fault("string is not valid UTF-8");
        } else {
          in.Skip(static_cast<int>(length));
        }
        break;
      }
      case WireType::WIRETYPE_START_GROUP: {
        if (depth >= 100) return fault("groups nested too deep");
        std::string inner = Walk(bytes, in, nullptr, name + ".", depth + 1);
        if (!inner.empty()) return inner;
        if (!in.LastTagWas(
                gp::internal::WireFormatLite::MakeTag(number, WireType::WIRETYPE_END_GROUP))) {
          return fault("group without its end");
        }
        break;
      }
      case WireType::WIRETYPE_END_GROUP:
        if (type == nullptr) return "";  // the end of the group being walked
        return fault("end of a group that was not started");
      default:
        return fault("invalid wire type " + std::to_string(wire));
    }
  }
}

}  // namespace

std::string DescribeWireFault(std::string_view bytes, const gp::Descriptor& type) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.PushLimit(static_cast<int>(bytes.size()));
  return Walk(bytes, in, &type, "", 0);
}

void ParseRequest(const grpc::ByteBuffer& bytes, gp::Message* message) {
  std::vector<grpc::Slice> slices;
  std::string joined;
  std::string_view data;
  if (bytes.Valid() && bytes.Dump(&slices).ok()) {
    if (slices.size() == 1) {
      data = std::string_view(reinterpret_cast<const char*>(slices[0].begin()), slices[0].size());
    } else {
      joined.reserve(bytes.Length());
      for (const grpc::Slice& s : slices)
        joined.append(reinterpret_cast<const char*>(s.begin()), s.size());
      data = joined;
    }
  }
  message->Clear();
  // The walk also runs on bytes libprotobuf takes: it finds two members of
  // one oneof, which libprotobuf accepts (keeping the last). One more linear
  // pass over the request, small next to tokenizing its prompt.
  const bool parsed = message->ParseFromArray(data.data(), static_cast<int>(data.size()));
  std::string why = DescribeWireFault(data, *message->GetDescriptor());
  if (parsed && why.empty()) return;
  if (why.empty())
    why = "not a valid protobuf encoding (" + std::to_string(data.size()) + " bytes)";
  throw RpcError(grpc::StatusCode::INVALID_ARGUMENT,
                 "malformed " + message->GetDescriptor()->name() + ": " + why);
}

void SerializeResponse(const gp::Message& message, grpc::ByteBuffer* out) {
  std::string bytes = message.SerializeAsString();
  grpc::Slice slice(std::move(bytes));
  *out = grpc::ByteBuffer(&slice, 1);
}

}  // namespace tq::grpc_api
