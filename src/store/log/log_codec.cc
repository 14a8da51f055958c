#include "store/log/log_codec.h"

#include <cstring>
#include <limits>

#include "store/log/crc32c.h"

namespace runnel::log {

void PutU8(std::string* dst, uint8_t v) {
  dst->push_back(static_cast<char>(v));
}
void PutU32(std::string* dst, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  dst->append(b, 4);
}
void PutU64(std::string* dst, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  dst->append(b, 8);
}
void PutVarint(std::string* dst, uint64_t v) {
  while (v >= 0x80) {
    dst->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}
void PutString(std::string* dst, std::string_view s) {
  PutU32(dst, static_cast<uint32_t>(s.size()));
  dst->append(s);
}
void PutRetention(std::string* dst, const StreamRetention& r) {
  uint8_t flags = (r.max_events ? kRetentionMaxEvents : 0) | (r.max_age_ms ? kRetentionMaxAge : 0) |
                  (r.max_bytes ? kRetentionMaxBytes : 0);
  PutU8(dst, flags);
  if (r.max_events) PutU64(dst, *r.max_events);
  if (r.max_age_ms) PutU64(dst, *r.max_age_ms);
  if (r.max_bytes) PutU64(dst, *r.max_bytes);
}
uint32_t LoadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t LoadU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

bool Reader::U8(uint8_t* v) {
  if (in_.size() < 1) return false;
  *v = static_cast<uint8_t>(in_[0]);
  in_.remove_prefix(1);
  return true;
}
bool Reader::U32(uint32_t* v) {
  if (in_.size() < 4) return false;
  *v = LoadU32(in_.data());
  in_.remove_prefix(4);
  return true;
}
bool Reader::U64(uint64_t* v) {
  if (in_.size() < 8) return false;
  *v = LoadU64(in_.data());
  in_.remove_prefix(8);
  return true;
}
bool Reader::Varint(uint64_t* v) {
  uint64_t out = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (in_.empty()) return false;
    const auto byte = static_cast<uint8_t>(in_.front());
    in_.remove_prefix(1);
    // The tenth byte holds the top bit only.
    if (shift == 63 && byte > 1) return false;
    out |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *v = out;
      return true;
    }
  }
  return false;
}
bool Reader::String(std::string_view* v) {
  uint32_t n;
  if (!U32(&n) || in_.size() < n) return false;
  *v = in_.substr(0, n);
  in_.remove_prefix(n);
  return true;
}
bool Reader::String(std::string* v) {
  std::string_view s;
  if (!String(&s)) return false;
  v->assign(s);
  return true;
}
bool Reader::Retention(StreamRetention* r) {
  uint8_t flags;
  if (!U8(&flags) || (flags & ~7u) != 0) return false;
  *r = StreamRetention{};
  uint64_t v;
  if (flags & kRetentionMaxEvents) {
    if (!U64(&v)) return false;
    r->max_events = v;
  }
  if (flags & kRetentionMaxAge) {
    if (!U64(&v)) return false;
    r->max_age_ms = v;
  }
  if (flags & kRetentionMaxBytes) {
    if (!U64(&v)) return false;
    r->max_bytes = v;
  }
  return true;
}

std::string EncodeSegmentHeader(uint64_t segment) {
  std::string h(kSegmentMagic);
  PutU32(&h, kFormatVersion);
  PutU32(&h, kSegmentHeaderSize);
  PutU64(&h, segment);
  PutU32(&h, MaskCrc(Crc32c(h)));
  PutU32(&h, 0);
  return h;
}

Status CheckSegmentHeader(std::string_view header, uint64_t segment, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Status::Corruption(std::string(what) +
                              ": bad segment header at byte 0: " + std::string(why));
  };
  if (header.size() < kSegmentHeaderSize) return bad("file shorter than its header");
  if (header.substr(0, 8) != kSegmentMagic) return bad("wrong magic");
  if (UnmaskCrc(LoadU32(header.data() + 24)) != Crc32c(header.substr(0, 24))) {
    return bad("checksum mismatch");
  }
  if (LoadU32(header.data() + 8) != kFormatVersion) {
    return bad("unsupported format version " + std::to_string(LoadU32(header.data() + 8)));
  }
  if (LoadU64(header.data() + 16) != segment) return bad("segment number differs from file name");
  return Status::OK();
}

void AppendFrame(std::string* dst, FrameType type, std::string_view body) {
  const size_t start = BeginFrame(dst, type);
  dst->append(body);
  FinishFrame(dst, start);
}

size_t BeginFrame(std::string* dst, FrameType type) {
  const size_t start = dst->size();
  PutU32(dst, 0);
  PutU32(dst, 0);
  PutU8(dst, static_cast<uint8_t>(type));
  return start;
}

void FinishFrame(std::string* dst, size_t start) {
  const size_t body = dst->size() - start - kFrameHeaderSize;
  char* frame = dst->data() + start;
  for (int i = 0; i < 4; ++i) frame[4 + i] = static_cast<char>((body >> (8 * i)) & 0xff);
  const uint32_t crc = Crc32cExtend(0, frame + 4, kFrameHeaderSize - 4 + body);
  const uint32_t masked = MaskCrc(crc);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((masked >> (8 * i)) & 0xff);
}

FrameCheck ParseFrame(std::string_view in, FrameView* out, bool verify_crc) {
  if (in.size() < kFrameHeaderSize) {
    for (char c : in) {
      if (c != 0) return FrameCheck::kTruncated;
    }
    return FrameCheck::kEnd;
  }
  bool zero = true;
  for (size_t i = 0; i < kFrameHeaderSize; ++i) zero = zero && in[i] == 0;
  if (zero) return FrameCheck::kEnd;
  const uint32_t len = LoadU32(in.data() + 4);
  if (len < kMinBodySize || len > kMaxBodySize) return FrameCheck::kBadLength;
  if (in.size() < kFrameHeaderSize + len) return FrameCheck::kTruncated;
  if (verify_crc) {
    const uint32_t crc = Crc32cExtend(0, in.data() + 4, kFrameHeaderSize - 4 + len);
    if (UnmaskCrc(LoadU32(in.data())) != crc) return FrameCheck::kBadCrc;
  }
  const uint8_t type = static_cast<uint8_t>(in[8]);
  if (type < 1 || type > kMaxFrameType) return FrameCheck::kBadCrc;
  out->type = static_cast<FrameType>(type);
  out->body = in.substr(kFrameHeaderSize, len);
  out->size = kFrameHeaderSize + len;
  return FrameCheck::kOk;
}

bool ZeroToSectorEnd(std::string_view rest, uint64_t pos) {
  const uint64_t to_end = kTornSectorSize - pos % kTornSectorSize;
  const std::string_view sector = rest.substr(0, static_cast<size_t>(to_end));
  for (char c : sector) {
    if (c != 0) return false;
  }
  return true;
}

std::string_view FrameCheckName(FrameCheck c) {
  switch (c) {
    case FrameCheck::kOk: return "ok";
    case FrameCheck::kEnd: return "end of data";
    case FrameCheck::kTruncated: return "truncated frame";
    case FrameCheck::kBadLength: return "impossible frame length";
    case FrameCheck::kBadCrc: return "checksum mismatch";
  }
  return "?";
}

std::string EncodeCreateStream(StreamId id, const StreamSpec& spec) {
  std::string b;
  PutU64(&b, id);
  PutString(&b, spec.ns);
  PutString(&b, spec.name);
  PutString(&b, spec.content_type);
  PutRetention(&b, spec.retention);
  PutU64(&b, spec.first_offset);
  PutU64(&b, spec.created_at_ms);
  PutString(&b, spec.attributes);
  return b;
}

std::string EncodeUpdateStream(StreamId id, const StreamRetention& r, std::string_view attrs) {
  std::string b;
  PutU64(&b, id);
  PutRetention(&b, r);
  PutString(&b, attrs);
  return b;
}

std::string EncodeDeleteStream(StreamId id) {
  std::string b;
  PutU64(&b, id);
  return b;
}

std::string EncodeCursorCommit(StreamId id, std::string_view consumer, uint64_t offset,
                               uint64_t now_ms) {
  std::string b;
  PutU64(&b, id);
  PutString(&b, consumer);
  PutU64(&b, offset);
  PutU64(&b, now_ms);
  return b;
}

std::string EncodeCursorDelete(StreamId id, std::string_view consumer) {
  std::string b;
  PutU64(&b, id);
  PutString(&b, consumer);
  return b;
}

std::string EncodeTruncateHead(StreamId id, uint64_t new_head) {
  std::string b;
  PutU64(&b, id);
  PutU64(&b, new_head);
  return b;
}

std::string EncodeCheckpointMarker(uint64_t seq) {
  std::string b;
  PutU64(&b, seq);
  return b;
}

std::string EncodeDropRecords(StreamId id, const std::vector<uint64_t>& offsets) {
  std::string b;
  b.reserve(12 + 2 * offsets.size());
  PutU64(&b, id);
  PutU32(&b, static_cast<uint32_t>(offsets.size()));
  uint64_t previous = 0;
  for (uint64_t o : offsets) {
    PutVarint(&b, o - previous);
    previous = o;
  }
  return b;
}

bool DecodeDropRecords(std::string_view body, StreamId* id, std::vector<uint64_t>* offsets) {
  Reader r(body);
  uint32_t count;
  if (!r.U64(id) || !r.U32(&count) || count == 0 || count > kMaxDroppedPerFrame ||
      count > r.remaining()) {
    return false;
  }
  offsets->clear();
  offsets->reserve(count);
  uint64_t previous = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t delta;
    if (!r.Varint(&delta) || (i > 0 && delta == 0) ||
        delta > std::numeric_limits<uint64_t>::max() - previous) {
      return false;
    }
    previous += delta;
    offsets->push_back(previous);
  }
  return r.done();
}

void EncodeAppendBatch(std::string* dst, StreamId id, uint64_t first_offset, uint64_t ts,
                       const std::vector<AppendRecord>& records, bool close,
                       const std::optional<ProducerState>& producer,
                       const std::optional<std::string>& attributes) {
  PutU64(dst, id);
  PutU64(dst, first_offset);
  PutU64(dst, ts);
  PutU32(dst, static_cast<uint32_t>(records.size()));
  PutU8(dst, (close ? kBatchClose : 0) | (producer ? kBatchProducer : 0) |
                 (attributes ? kBatchAttributes : 0));
  if (producer) {
    PutString(dst, producer->producer_id);
    PutU64(dst, producer->epoch);
    PutU64(dst, producer->seq);
  }
  if (attributes) PutString(dst, *attributes);
  for (const AppendRecord& r : records) {
    PutU8(dst, r.key ? 1 : 0);
    if (r.key) PutString(dst, *r.key);
    PutString(dst, r.payload);
  }
}

void EncodeCompactedBatch(std::string* dst, StreamId id, uint64_t first_offset, uint64_t ts,
                          uint32_t source_len, const std::vector<AppendRecord>& records) {
  PutU64(dst, id);
  PutU64(dst, first_offset);
  PutU64(dst, ts);
  PutU32(dst, static_cast<uint32_t>(records.size()));
  PutU8(dst, kBatchCompacted);
  PutU32(dst, source_len);
  for (const AppendRecord& r : records) {
    PutU8(dst, r.key ? 1 : 0);
    if (r.key) PutString(dst, *r.key);
    PutString(dst, r.payload);
  }
}

bool DecodeAppendBatch(std::string_view body, AppendBatchHeader* h,
                       std::vector<std::pair<uint32_t, uint32_t>>* sizes,
                       std::vector<StoredRecord>* records, uint64_t min_offset, size_t limit) {
  Reader r(body);
  uint8_t flags;
  if (!r.U64(&h->stream) || !r.U64(&h->first_offset) || !r.U64(&h->timestamp) ||
      !r.U32(&h->count) || !r.U8(&flags) ||
      (flags & ~unsigned{kBatchClose | kBatchProducer | kBatchAttributes | kBatchCompacted}) != 0) {
    return false;
  }
  h->source_len = 0;
  if (flags & kBatchCompacted) {
    if (!r.U32(&h->source_len) || h->source_len < kFrameHeaderSize + kMinBodySize) return false;
  }
  h->close = flags & kBatchClose;
  h->producer.reset();
  if (flags & kBatchProducer) {
    ProducerState p;
    if (!r.String(&p.producer_id) || !r.U64(&p.epoch) || !r.U64(&p.seq)) return false;
    h->producer = std::move(p);
  }
  h->attributes.reset();
  if (flags & kBatchAttributes) {
    std::string_view attrs;
    if (!r.String(&attrs)) return false;
    h->attributes = std::string(attrs);
  }
  if (h->count > r.remaining() / 5) return false;  // each record needs at least 5 bytes
  for (uint32_t i = 0; i < h->count; ++i) {
    uint8_t has_key;
    std::string_view key, payload;
    if (!r.U8(&has_key) || has_key > 1) return false;
    if (has_key && !r.String(&key)) return false;
    if (!r.String(&payload)) return false;
    if (sizes) {
      sizes->emplace_back(static_cast<uint32_t>(payload.size()), static_cast<uint32_t>(key.size()));
    }
    const uint64_t offset = h->first_offset + i;
    if (records && offset >= min_offset && records->size() < limit) {
      StoredRecord rec;
      rec.offset = offset;
      rec.appended_at_ms = h->timestamp;
      if (has_key) rec.key = std::string(key);
      rec.payload = std::string(payload);
      records->push_back(std::move(rec));
    }
  }
  return r.done();
}

bool BodyStreamId(FrameType type, std::string_view body, StreamId* id) {
  if (type == FrameType::kCheckpointMarker) {
    *id = 0;
    return true;
  }
  Reader r(body);
  return r.U64(id);
}

std::string DescribeFrame(FrameType type, std::string_view body) {
  Reader r(body);
  uint64_t id = 0, a = 0, b = 0;
  std::string s1, s2;
  switch (type) {
    case FrameType::kCreateStream: {
      StreamSpec spec;
      StreamRetention ret;
      if (!r.U64(&id) || !r.String(&spec.ns) || !r.String(&spec.name) ||
          !r.String(&spec.content_type) || !r.Retention(&ret) || !r.U64(&a)) {
        return "create-stream (malformed)";
      }
      return "create-stream id=" + std::to_string(id) + " ns=" + spec.ns + " name=" + spec.name +
             " first_offset=" + std::to_string(a);
    }
    case FrameType::kUpdateStream: r.U64(&id); return "update-stream id=" + std::to_string(id);
    case FrameType::kDeleteStream: r.U64(&id); return "delete-stream id=" + std::to_string(id);
    case FrameType::kAppendBatch:
    case FrameType::kRelocatedBatch: {
      AppendBatchHeader h;
      std::vector<StoredRecord> recs;
      if (!DecodeAppendBatch(body, &h, nullptr, &recs)) return "append-batch (malformed)";
      std::string out =
          std::string(type == FrameType::kAppendBatch ? "append-batch" : "relocated-batch") +
          " id=" + std::to_string(h.stream) + " first_offset=" + std::to_string(h.first_offset) +
          " ts=" + std::to_string(h.timestamp) + " count=" + std::to_string(h.count);
      if (h.close) out += " close";
      if (h.source_len != 0) out += " compacted from " + std::to_string(h.source_len) + "B";
      if (h.attributes) out += " attributes=" + std::to_string(h.attributes->size()) + "B";
      if (h.producer) {
        out += " producer=" + h.producer->producer_id + "/" + std::to_string(h.producer->epoch) +
               "/" + std::to_string(h.producer->seq);
      }
      for (const auto& rec : recs) {
        out += " [" + std::to_string(rec.offset) + (rec.key ? " key=" + *rec.key : "") + " " +
               rec.payload + "]";
      }
      return out;
    }
    case FrameType::kCursorCommit:
      if (!r.U64(&id) || !r.String(&s1) || !r.U64(&a) || !r.U64(&b)) return "cursor (malformed)";
      return "cursor-commit id=" + std::to_string(id) + " consumer=" + s1 +
             " offset=" + std::to_string(a) + " ts=" + std::to_string(b);
    case FrameType::kCursorDelete:
      if (!r.U64(&id) || !r.String(&s1)) return "cursor-delete (malformed)";
      return "cursor-delete id=" + std::to_string(id) + " consumer=" + s1;
    case FrameType::kTruncateHead:
      if (!r.U64(&id) || !r.U64(&a)) return "truncate-head (malformed)";
      return "truncate-head id=" + std::to_string(id) + " new_head=" + std::to_string(a);
    case FrameType::kDropRecords: {
      std::vector<uint64_t> offsets;
      if (!DecodeDropRecords(body, &id, &offsets)) return "drop-records (malformed)";
      std::string out = "drop-records id=" + std::to_string(id) +
                        " count=" + std::to_string(offsets.size()) + " offsets=";
      // The first and last few: a frame may name thousands.
      for (size_t i = 0; i < offsets.size(); ++i) {
        if (i == 8 && offsets.size() > 16) {
          out += "...,";
          i = offsets.size() - 8;
        }
        out += std::to_string(offsets[i]) + (i + 1 < offsets.size() ? "," : "");
      }
      return out;
    }
    case FrameType::kCheckpointMarker:
      r.U64(&a);
      return "checkpoint-marker seq=" + std::to_string(a);
  }
  return "unknown";
}

}  // namespace runnel::log
