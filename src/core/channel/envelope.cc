#include <cstring>
#include <string>

#include "core/channel/envelope_format.h"
#include "runnel/channel.h"

namespace runnel {
namespace channel {

namespace {

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void PutBytes(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}
void PutOptString(std::string& out, const std::optional<std::string>& s) {
  if (!s) {
    out.push_back(static_cast<char>(kAbsent));
    return;
  }
  out.push_back(static_cast<char>(kPresent));
  PutBytes(out, *s);
}

Status Corrupt(std::string_view what) {
  return Status::Corruption("EnvelopeError: " + std::string(what));
}

// A bounds-checked reader over the encoded bytes.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  size_t remaining() const { return in_.size() - pos_; }

  Status U8(uint8_t* v, std::string_view field) {
    if (remaining() < 1) return Truncated(field);
    *v = static_cast<uint8_t>(in_[pos_++]);
    return Status::OK();
  }
  Status U32(uint32_t* v, std::string_view field) {
    if (remaining() < 4) return Truncated(field);
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) {
      r |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += 4;
    *v = r;
    return Status::OK();
  }
  Status U64(uint64_t* v, std::string_view field) {
    if (remaining() < 8) return Truncated(field);
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) {
      r |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += 8;
    *v = r;
    return Status::OK();
  }
  Status Bytes(std::string* v, std::string_view field) {
    uint32_t len = 0;
    RUNNEL_RETURN_IF_ERROR(U32(&len, field));
    if (remaining() < len) return Truncated(field);
    v->assign(in_.substr(pos_, len));
    pos_ += len;
    return Status::OK();
  }
  Status Utf8(std::string* v, std::string_view field) {
    RUNNEL_RETURN_IF_ERROR(Bytes(v, field));
    if (!IsValidUtf8(*v)) return Corrupt(std::string(field) + " is not valid UTF-8");
    return Status::OK();
  }
  Status Presence(bool* present, std::string_view field) {
    uint8_t b = 0;
    RUNNEL_RETURN_IF_ERROR(U8(&b, field));
    if (b != kAbsent && b != kPresent) {
      return Corrupt("presence byte of " + std::string(field) + " is " + std::to_string(b));
    }
    *present = b == kPresent;
    return Status::OK();
  }
  Status OptUtf8(std::optional<std::string>* v, std::string_view field) {
    bool present = false;
    RUNNEL_RETURN_IF_ERROR(Presence(&present, field));
    if (!present) {
      v->reset();
      return Status::OK();
    }
    std::string s;
    RUNNEL_RETURN_IF_ERROR(Utf8(&s, field));
    *v = std::move(s);
    return Status::OK();
  }

 private:
  static Status Truncated(std::string_view field) {
    return Corrupt("truncated in " + std::string(field));
  }
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace
}  // namespace channel

std::string EncodeEnvelope(const MessageEnvelope& e) {
  using namespace channel;  // NOLINT(google-build-using-namespace): the format's own helpers
  std::string out;
  out.reserve(kEnvelopeFixedHeaderSize + 32 + e.publisher_id.size() + e.payload.size() +
              (e.idempotency_key ? e.idempotency_key->size() : 0) + (e.key ? e.key->size() : 0));
  out.append(kEnvelopeMagic);
  out.push_back(static_cast<char>(kEnvelopeVersion));
  PutU64(out, e.timestamp_ms);
  PutBytes(out, e.publisher_id);
  PutOptString(out, e.idempotency_key);
  PutOptString(out, e.key);
  if (!e.causal_context) {
    out.push_back(static_cast<char>(kAbsent));
  } else {
    out.push_back(static_cast<char>(kPresent));
    PutOptString(out, e.causal_context->parent_id);
    if (!e.causal_context->vector_clock_entry) {
      out.push_back(static_cast<char>(kAbsent));
    } else {
      out.push_back(static_cast<char>(kPresent));
      PutU64(out, *e.causal_context->vector_clock_entry);
    }
  }
  PutBytes(out, e.payload);
  return out;
}

Result<MessageEnvelope> DecodeEnvelope(std::string_view bytes) {
  using namespace channel;  // NOLINT(google-build-using-namespace)
  if (bytes.size() < kEnvelopeMagic.size()) return Corrupt("truncated in magic");
  if (bytes.substr(0, kEnvelopeMagic.size()) != kEnvelopeMagic) return Corrupt("bad magic");
  Reader r(bytes.substr(kEnvelopeMagic.size()));
  MessageEnvelope e;
  uint8_t version = 0;
  RUNNEL_RETURN_IF_ERROR(r.U8(&version, "version"));
  if (version != kEnvelopeVersion) {
    return Corrupt("unknown envelope version " + std::to_string(version));
  }
  RUNNEL_RETURN_IF_ERROR(r.U64(&e.timestamp_ms, "timestamp_ms"));
  RUNNEL_RETURN_IF_ERROR(r.Utf8(&e.publisher_id, "publisher_id"));
  RUNNEL_RETURN_IF_ERROR(r.OptUtf8(&e.idempotency_key, "idempotency_key"));
  RUNNEL_RETURN_IF_ERROR(r.OptUtf8(&e.key, "key"));
  bool has_context = false;
  RUNNEL_RETURN_IF_ERROR(r.Presence(&has_context, "causal_context"));
  if (has_context) {
    CausalContext c;
    RUNNEL_RETURN_IF_ERROR(r.OptUtf8(&c.parent_id, "parent_id"));
    bool has_clock = false;
    RUNNEL_RETURN_IF_ERROR(r.Presence(&has_clock, "vector_clock_entry"));
    if (has_clock) {
      uint64_t v = 0;
      RUNNEL_RETURN_IF_ERROR(r.U64(&v, "vector_clock_entry"));
      c.vector_clock_entry = v;
    }
    e.causal_context = std::move(c);
  }
  RUNNEL_RETURN_IF_ERROR(r.Bytes(&e.payload, "payload"));
  if (r.remaining() != 0) {
    return Corrupt(std::to_string(r.remaining()) + " trailing bytes");
  }
  return e;
}

uint64_t HashKeyPartitioner(const MessageEnvelope& envelope) {
  if (!envelope.key) return 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : *envelope.key) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace runnel
