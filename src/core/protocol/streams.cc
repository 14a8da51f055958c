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

// The decision is core's (core/protocol/append.h), the same the HTTP server's POST takes; this
// door blocks for the write and maps the outcome to a status.
Result<ProtocolAppendResult> Streams::Append(const StreamScope& scope, std::string_view name,
                                             const ProtocolAppend& a) {
  protocol::Catalog& catalog = *catalog_;
  bool fresh = false;
  // A retry is fresh (never from the cache again): at most two rounds.
  for (;;) {
    protocol::AppendSpec spec;
    spec.content_type = a.content_type;
    spec.body = a.body;
    spec.close = a.close;
    spec.stream_seq = a.stream_seq;
    if (a.producer)
      spec.producer = ProducerState{a.producer->id, a.producer->epoch, a.producer->seq, 0};
    spec.expected_position = a.expected_position;
    protocol::PreparedAppend prepared = catalog.PrepareAppend(scope, name, std::move(spec), fresh);
    protocol::AppendOutcome outcome =
        prepared.answer
            ? std::move(*prepared.answer)
            : catalog.FinishAppend(
                  prepared, catalog.registry().store().AppendAndWait(std::move(prepared.request)));
    using Kind = protocol::AppendOutcome::Kind;
    switch (outcome.kind) {
      case Kind::kRetry: fresh = true; continue;
      case Kind::kRefused: return outcome.status;
      case Kind::kAppended:
      case Kind::kDuplicate:
      case Kind::kNoop:
        return ProtocolAppendResult{
            outcome.tail_position.value_or(protocol::TailPosition(prepared.found->info)),
            outcome.kind == Kind::kDuplicate, outcome.closed};
    }
  }
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
