// runnel::Streams (runnel/streams.h): the synchronous door to the protocol's per-stream rules.
// Every decision is a call into core/protocol (the catalog and rules.h), the same calls the
// HTTP server's asynchronous append path makes.
#include "runnel/streams.h"

#include "core/protocol/catalog.h"
#include "core/protocol/json_messages.h"
#include "core/protocol/rules.h"

namespace runnel {

namespace {

using protocol::Found;

Status Deleted(std::string_view name) {
  return Status::NotFound("stream '" + std::string(name) + "' was deleted");
}

// The live stream (soft-deleted ones are kNotFound here), renewing its TTL.
Result<Found> FindLive(protocol::Catalog& catalog, const StreamScope& scope,
                       std::string_view name) {
  RUNNEL_ASSIGN_OR_RETURN(Found found, catalog.Lookup(scope, name));
  if (found.meta.soft_deleted) return Deleted(name);
  catalog.Touch(found.info, found.meta);
  return found;
}

}  // namespace

Streams::Streams(StreamRegistry registry, StreamsOptions options)
    : catalog_(std::make_shared<protocol::Catalog>(
          std::move(registry),
          protocol::CatalogOptions{
              .ttl_grace_ms = options.ttl_grace_ms,
              .max_forks_per_stream = options.max_forks_per_stream,
              .max_fork_bytes = options.max_fork_bytes,
              .max_append_messages = options.max_append_messages,
              .background = nullptr,
              .now_ms = options.now_ms,
          })),
      options_(std::move(options)) {}

Result<ProtocolStreamInfo> Streams::Lookup(const StreamScope& scope, std::string_view name) {
  RUNNEL_ASSIGN_OR_RETURN(Found found, FindLive(*catalog_, scope, name));
  ProtocolStreamInfo out;
  out.tail_position = protocol::TailPosition(found.info);
  out.ttl_s = found.meta.ttl_s;
  out.expires_at = found.meta.expires_at;
  out.stream_seq = found.meta.stream_seq;
  out.closed = found.info.closed;
  out.info = std::move(found.info);
  return out;
}

Result<ProtocolCreateResult> Streams::Create(const StreamScope& scope, std::string_view name,
                                             const ProtocolCreate& create) {
  protocol::CreateSpec spec;
  if (!create.content_type.empty()) spec.content_type = create.content_type;
  spec.ttl_s = create.ttl_s;
  spec.expires_at = create.expires_at;
  spec.closed = create.closed;
  spec.retention = create.retention;
  spec.body = create.body;
  if (create.fork) {
    spec.fork = protocol::ForkSpec{.scope = create.fork->scope,
                                   .name = create.fork->name,
                                   .position = create.fork->position,
                                   .sub_offset = create.fork->sub_offset};
  }
  RUNNEL_ASSIGN_OR_RETURN(protocol::Created created, catalog_->Create(scope, name, spec));
  return ProtocolCreateResult{created.created, created.tail_position, created.closed};
}

Status Streams::Delete(const StreamScope& scope, std::string_view name) {
  return catalog_->Delete(scope, name);
}

Status Streams::UpdateRetention(const StreamScope& scope, std::string_view name,
                                const StreamRetention& retention) {
  return catalog_->UpdateRetention(scope, name, retention).status();
}

// The decisions in the order the HTTP server's append makes them (StreamService::Append): each
// one a call into core/protocol. About 90 lines: one straight sequence of checks.
Result<ProtocolAppendResult> Streams::Append(const StreamScope& scope, std::string_view name,
                                             const ProtocolAppend& a) {
  return AppendOnce(scope, name, a, /*retry_race=*/true);
}

Result<ProtocolAppendResult> Streams::AppendOnce(const StreamScope& scope, std::string_view name,
                                                 const ProtocolAppend& a, bool retry_race) {
  protocol::Catalog& catalog = *catalog_;
  Store& store = catalog.registry().store();
  RUNNEL_ASSIGN_OR_RETURN(Found found, FindLive(catalog, scope, name));
  if (found.meta.channel) {
    return Status::FailedPrecondition("stream '" + std::string(name) +
                                      "' belongs to a runnel channel: publish through it");
  }
  const StreamInfo& info = found.info;
  std::optional<ProducerState> stored;
  std::optional<protocol::ProducerCheck> check;
  if (a.producer) {
    if (a.producer->id.empty()) return Status::InvalidArgument("a producer id must be non-empty");
    RUNNEL_ASSIGN_OR_RETURN(stored, store.GetProducer(info.id, a.producer->id));
    check = protocol::CheckProducer(stored, a.producer->epoch, a.producer->seq);
  }
  const uint64_t tail = protocol::TailPosition(info);
  if (info.closed) {
    if (check && check->verdict == protocol::ProducerVerdict::kDuplicate) {
      return ProtocolAppendResult{tail, true, true};
    }
    if (a.body.empty() && a.close) return ProtocolAppendResult{tail, false, true};
    return Status::FailedPrecondition("stream is closed");
  }
  if (a.body.empty() && !a.close) return Status::InvalidArgument("an append needs a body");
  if (!a.body.empty()) {
    if (a.content_type.empty()) return Status::InvalidArgument("a content type is required");
    if (!protocol::SameContentType(a.content_type, info.spec.content_type)) {
      return Status::Conflict("content type does not match the stream's", 0, 0);
    }
  }
  if (check) {
    switch (check->verdict) {
      case protocol::ProducerVerdict::kAccept: break;
      case protocol::ProducerVerdict::kDuplicate: return ProtocolAppendResult{tail, true, false};
      case protocol::ProducerVerdict::kStaleEpoch:
        return Status::PermissionDenied("stale producer epoch");
      case protocol::ProducerVerdict::kBadNewEpoch:
        return Status::InvalidArgument("a new producer epoch must start at sequence 0");
      case protocol::ProducerVerdict::kGap:
        return Status::Conflict("producer sequence gap", check->expected_seq, a.producer->seq);
    }
  }
  if (a.stream_seq) {
    RUNNEL_RETURN_IF_ERROR(protocol::ValidateStreamSeq(*a.stream_seq));
    RUNNEL_RETURN_IF_ERROR(protocol::CheckStreamSeq(found.meta.stream_seq, *a.stream_seq));
  }
  if (a.expected_position) {
    RUNNEL_RETURN_IF_ERROR(protocol::CheckExpectedPosition(*a.expected_position, info));
  }
  std::vector<AppendRecord> records;
  if (!a.body.empty()) {
    if (protocol::IsJsonContentType(info.spec.content_type)) {
      RUNNEL_ASSIGN_OR_RETURN(auto messages,
                              protocol::SplitJsonMessages(a.body, /*allow_empty_array=*/false,
                                                          options_.max_append_messages));
      for (std::string& m : messages) records.push_back(AppendRecord{std::nullopt, std::move(m)});
    } else {
      records.push_back(AppendRecord{std::nullopt, a.body});
    }
  }
  if (found.meta.compaction) RUNNEL_RETURN_IF_ERROR(protocol::ValidateStateMessages(records));
  AppendRequest request;
  request.stream = info.id;
  request.now_ms = catalog.registry().clock().NowMs();
  request.close = a.close;
  if (a.producer)
    request.producer = ProducerState{a.producer->id, a.producer->epoch, a.producer->seq, 0};
  if (a.expected_position && !records.empty()) request.expected_offset = *a.expected_position + 1;
  request.records = std::move(records);
  if (a.stream_seq) {
    // The last Stream-Seq commits with the records (SEMANTICS E4).
    RUNNEL_ASSIGN_OR_RETURN(auto meta_append, catalog.BeginMetaAppend(info.id, *a.stream_seq));
    request.attributes = std::move(meta_append.attributes);
    request.expected_attributes = std::move(meta_append.read);
  } else if (!info.EverHeldARecord()) {
    // A channel may adopt a stream that never held a record: expect it untagged.
    request.expected_attributes = info.spec.attributes;
  }
  const bool expects_attributes = request.expected_attributes.has_value();
  Result<AppendResult> result = store.AppendAndWait(std::move(request));
  if (a.stream_seq) catalog.MetaAppendDone(info.id);
  if (!result.ok() && expects_attributes && retry_race &&
      result.status().code() == StatusCode::kConflict) {
    // Nothing was written: the attributes changed after they were read (an access recorded,
    // a write through another node). Decide again from what is stored now, as the server does.
    return AppendOnce(scope, name, a, /*retry_race=*/false);
  }
  if (!result.ok()) {
    if (a.producer && result.status().code() == StatusCode::kAlreadyExists) {
      // Committed meanwhile through another node sharing the store: a duplicate.
      auto now = store.GetStreamById(info.id);
      return ProtocolAppendResult{now.ok() ? protocol::TailPosition(*now) : tail, true, false};
    }
    return result.status();
  }
  return ProtocolAppendResult{result->next_offset - 1, false, a.close};
}

Result<ProtocolAppendResult> Streams::Close(const StreamScope& scope, std::string_view name) {
  ProtocolAppend close;
  close.close = true;
  return Append(scope, name, close);
}

Result<ProtocolRead> Streams::Read(const StreamScope& scope, std::string_view name,
                                   uint64_t position, size_t max_records) {
  Store& store = catalog_->registry().store();
  RUNNEL_ASSIGN_OR_RETURN(Found found, FindLive(*catalog_, scope, name));
  if (position > protocol::TailPosition(found.info)) {
    return Status::InvalidArgument("position is beyond the stream's tail");
  }
  RUNNEL_ASSIGN_OR_RETURN(
      auto records,
      store.Read(found.info.id, position + 1, std::min(max_records, StreamRegistry::kMaxReadLimit),
                 StreamRegistry::kMaxReadBytes));
  // Read after the records, so the flags never claim more than what was read.
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, store.GetStreamById(found.info.id));
  ProtocolRead out;
  out.next_position = position;
  for (StoredRecord& r : records) {
    out.next_position = r.offset;
    out.records.push_back(std::move(r.payload));
  }
  if (out.records.empty()) out.next_position = protocol::PastTrimmed(info, position);
  out.up_to_date = out.next_position >= protocol::TailPosition(info);
  out.closed = info.closed && out.up_to_date;
  return out;
}

}  // namespace runnel
