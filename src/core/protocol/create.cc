// protocol::Catalog::Create (core/protocol/catalog.h): what a valid create is, the idempotent
// re-create, forks (SEMANTICS E12, E13) and the initial commit. The HTTP server's PUT and
// runnel::Streams::Create both call it.
#include <algorithm>
#include <chrono>
#include <thread>

#include "core/attributes.h"
#include "core/protocol/catalog.h"
#include "core/protocol/json_messages.h"
#include "core/protocol/rules.h"

namespace runnel::protocol {

namespace {

constexpr std::string_view kOctetStream = "application/octet-stream";

// The rules a create's spec keeps by itself; `*expires_at_ms` becomes its Expires-At, parsed.
Status ValidateSpec(const CreateSpec& spec, std::optional<int64_t>* expires_at_ms) {
  if (spec.ttl_s && spec.expires_at) {
    return Status::InvalidArgument("Stream-TTL and Stream-Expires-At are mutually exclusive");
  }
  if (spec.ttl_s && *spec.ttl_s > kMaxSafeInteger) {
    return Status::InvalidArgument("Stream-TTL must be a non-negative integer");
  }
  if (spec.expires_at) {
    *expires_at_ms = ParseRfc3339(*spec.expires_at);
    if (!*expires_at_ms) return Status::InvalidArgument("Stream-Expires-At must be RFC 3339");
  }
  if (spec.fork && spec.fork->sub_offset > kMaxSafeInteger) {
    return Status::InvalidArgument("Stream-Fork-Sub-Offset must be a non-negative integer");
  }
  if (spec.compaction) {
    if (!spec.content_type || !IsJsonContentType(*spec.content_type)) {
      return Status::InvalidArgument(
          "Stream-Compaction: state needs Content-Type: application/json (State Protocol "
          "messages are JSON)");
    }
    if (spec.fork) return Status::InvalidArgument("a fork cannot set Stream-Compaction");
    // Compaction decides alone which records go: a reader's 410 is the horizon's, never a
    // retention cap's.
    if (!(spec.retention == StreamRetention{})) {
      return Status::InvalidArgument(
          "Stream-Compaction cannot be combined with Stream-Retention-* caps");
    }
    if (spec.compaction->tombstone_ms > compaction::kMaxTombstoneMs) {
      return Status::InvalidArgument(
          "Stream-Compaction-Tombstone-Ms must be an integer from 0 to " +
          std::to_string(compaction::kMaxTombstoneMs));
    }
  }
  return Status::OK();
}

// Whether an existing live stream has the configuration `spec` asks for (an idempotent
// re-create). A fork that names no TTL or Expires-At matches whatever it inherited, and one
// that names no position matches any.
bool SameConfig(const CreateSpec& spec, const std::optional<int64_t>& expires_at_ms,
                const Found& f) {
  const std::string want_ct = spec.content_type ? NormalizeContentType(*spec.content_type)
                              : spec.fork       ? NormalizeContentType(f.info.spec.content_type)
                                                : std::string(kOctetStream);
  if (want_ct != NormalizeContentType(f.info.spec.content_type)) return false;
  if (!spec.fork || spec.ttl_s || spec.expires_at) {
    if (spec.ttl_s != f.meta.ttl_s || expires_at_ms != f.meta.expires_at_ms) return false;
  }
  if (spec.closed != f.info.closed || !(spec.retention == f.info.spec.retention)) return false;
  if (spec.compaction.has_value() != f.meta.compaction.has_value()) return false;
  if (spec.compaction && spec.compaction->tombstone_ms != f.meta.compaction->tombstone_ms) {
    return false;
  }
  if (!spec.fork) return !f.meta.fork_ns;
  return f.meta.fork_ns == spec.fork->scope.Label() && f.meta.fork_name == spec.fork->name &&
         (!spec.fork->position || *spec.fork->position == f.meta.fork_position) &&
         spec.fork->sub_offset == f.meta.fork_sub_offset;
}

// What a fork copies from its source: the records through `position` at their offsets, then
// its sub-offset's part of what follows.
struct Inheritance {
  std::vector<AppendRecord> records;
  uint64_t first_offset = 1;
};

// Reads a fork's inherited records from `source`, bounded by `max_bytes` (kResourceExhausted
// beyond, `*payload` set). About 60 lines: one bounded copy loop and the two sub-offset forms.
Result<Inheritance> Inherit(Store& store, const StreamInfo& source, uint64_t position,
                            uint64_t sub_offset, size_t max_bytes, bool* payload) {
  Inheritance out;
  uint64_t copied_bytes = 0;
  auto too_large = [&](const StoredRecord& rec) {
    copied_bytes += rec.payload.size() + (rec.key ? rec.key->size() : 0);
    if (copied_bytes <= max_bytes) return Status::OK();
    *payload = true;
    return Status::ResourceExhausted(
        "the fork would copy more than " + std::to_string(max_bytes) +
        " bytes of records from its source (the server's --max-fork-bytes); fork at an earlier "
        "offset");
  };
  uint64_t from = 1;
  bool first = true;
  while (from <= position) {
    RUNNEL_ASSIGN_OR_RETURN(auto page, store.Read(source.id, from, StreamRegistry::kMaxReadLimit,
                                                  StreamRegistry::kMaxReadBytes));
    if (page.empty()) break;
    for (StoredRecord& rec : page) {
      if (rec.offset > position) break;
      RUNNEL_RETURN_IF_ERROR(too_large(rec));
      if (first) {
        out.first_offset = rec.offset;
        first = false;
      }
      out.records.push_back(AppendRecord{std::move(rec.key), std::move(rec.payload)});
    }
    from = page.back().offset + 1;
  }
  if (first) out.first_offset = position + 1;
  if (sub_offset == 0) return out;
  if (IsJsonContentType(source.spec.content_type)) {
    if (sub_offset > TailPosition(source) - position) {
      return Status::InvalidArgument("Stream-Fork-Sub-Offset is past the source's data");
    }
    RUNNEL_ASSIGN_OR_RETURN(
        auto extra, store.Read(source.id, position + 1, sub_offset, StreamRegistry::kMaxReadBytes));
    for (StoredRecord& rec : extra) {
      RUNNEL_RETURN_IF_ERROR(too_large(rec));
      out.records.push_back(AppendRecord{std::move(rec.key), std::move(rec.payload)});
    }
    return out;
  }
  RUNNEL_ASSIGN_OR_RETURN(auto next, store.ReadAt(source.id, position + 1));
  if (!next || next->payload.size() < sub_offset) {
    return Status::InvalidArgument("Stream-Fork-Sub-Offset is past the next data boundary");
  }
  out.records.push_back(AppendRecord{std::nullopt, next->payload.substr(0, sub_offset)});
  return out;
}

}  // namespace

Result<Created> Catalog::Create(const StreamScope& scope, std::string_view name,
                                const CreateSpec& spec, CreateRefusal* refusal) {
  if (refusal) *refusal = CreateRefusal::kNone;
  ForgetCached(scope, name);
  return CreateOnce(scope, name, spec, /*after_race=*/false, refusal);
}

// The steps in order: validate, answer an existing stream, resolve and copy the fork's source,
// split the body, create (marked `creating` when records or a close follow), list the fork in
// its source, commit. About 150 lines: one sequence whose steps share the plan being built.
Result<Created> Catalog::CreateOnce(const StreamScope& scope, std::string_view name,
                                    const CreateSpec& spec, bool after_race,
                                    CreateRefusal* refusal) {
  std::optional<int64_t> expires_at_ms;
  RUNNEL_RETURN_IF_ERROR(ValidateSpec(spec, &expires_at_ms));
  const std::string name_str(name);

  auto existing = Lookup(scope, name);
  if (existing.ok() && existing->meta.soft_deleted) {
    // Its forks may all be gone, the last one removed by a node that stopped before unlisting
    // it (see Remove): then the name is free, once the source is collected.
    Meta meta = existing->meta;
    Status pruned = ForgetDeadForks(existing->info.id, &meta);
    if (pruned.ok() && !meta.HasForks()) pruned = Remove(existing->info, meta);
    RUNNEL_RETURN_IF_ERROR(pruned);
    if (!meta.HasForks()) existing = Status::NotFound("stream '" + name_str + "' was collected");
  }
  if (existing.ok()) {
    if (existing->meta.soft_deleted) {
      return Status::AlreadyExists("a deleted stream with live forks still holds this path");
    }
    if (!SameConfig(spec, expires_at_ms, *existing)) {
      return Status::AlreadyExists("stream '" + name_str +
                                   "' already exists with a different configuration");
    }
    Created out;
    out.tail_position = TailPosition(existing->info);
    out.closed = existing->info.closed;
    out.info = std::move(existing->info);
    return out;
  }
  if (existing.status().code() != StatusCode::kNotFound) return existing.status();

  Meta meta;
  meta.ttl_s = spec.ttl_s;
  meta.expires_at = spec.expires_at;
  meta.expires_at_ms = expires_at_ms;
  std::string content_type = spec.content_type.value_or(std::string(kOctetStream));
  Inheritance inherited;
  std::optional<Found> source;
  if (spec.fork) {
    const ForkSpec& fork = *spec.fork;
    RUNNEL_ASSIGN_OR_RETURN(source, Lookup(fork.scope, fork.name));
    if (source->meta.soft_deleted) return Status::FailedPrecondition("fork source was deleted");
    const StreamInfo& sinfo = source->info;
    if (spec.content_type && !SameContentType(*spec.content_type, sinfo.spec.content_type)) {
      return Status::AlreadyExists("fork content type differs from the source stream's");
    }
    content_type = sinfo.spec.content_type;
    const uint64_t position = fork.position.value_or(TailPosition(sinfo));
    if (position > TailPosition(sinfo)) {
      return Status::InvalidArgument("Stream-Fork-Offset is beyond the source stream's tail");
    }
    // Below its last compaction point a compacted stream no longer holds the state at every
    // offset (a row whose latest change came later has no record there any more).
    if (const auto& c = source->meta.compaction;
        c && position > 0 && position < c->compacted_through) {
      return Status::InvalidArgument(
          "Stream-Fork-Offset is before the source's last compaction point; fork at position " +
          std::to_string(c->compacted_through) + " or later");
    }
    if (!spec.ttl_s && !spec.expires_at) {
      meta.ttl_s = source->meta.ttl_s;
      meta.expires_at = source->meta.expires_at;
      meta.expires_at_ms = source->meta.expires_at_ms;
    }
    // Checked before any record is copied, and again as the fork is listed (forks created
    // meanwhile, through another node too, count there).
    if (source->meta.Forks() >= options_.max_forks_per_stream) return TooManyForks(fork.name);
    meta.fork_source_id = sinfo.id;
    meta.fork_ns = fork.scope.Label();
    meta.fork_name = fork.name;
    meta.fork_position = position;
    meta.fork_sub_offset = fork.sub_offset;
    bool payload = false;
    auto copied = Inherit(registry_.store(), sinfo, position, fork.sub_offset,
                          options_.max_fork_bytes, &payload);
    if (!copied.ok() && payload && refusal) *refusal = CreateRefusal::kPayload;
    RUNNEL_RETURN_IF_ERROR(copied.status());
    inherited = std::move(*copied);
  }

  std::vector<AppendRecord> initial;
  if (IsJsonContentType(content_type)) {
    if (!spec.body.empty()) {
      auto messages =
          SplitJsonMessages(spec.body, /*allow_empty_array=*/true, options_.max_append_messages);
      if (!messages.ok() && refusal) *refusal = CreateRefusal::kPayload;
      RUNNEL_RETURN_IF_ERROR(messages.status());
      for (std::string& m : *messages) initial.push_back(AppendRecord{std::nullopt, std::move(m)});
    }
  } else if (!spec.body.empty()) {
    initial.push_back(AppendRecord{std::nullopt, spec.body});
  }
  if (spec.compaction) {
    if (!registry_.store().SupportsDropRecords()) {
      return Status::FailedPrecondition(
          "Stream-Compaction is not supported by the server's " +
          std::string(registry_.store().Name()) +
          " store: it cannot remove records from the middle of a stream");
    }
    RUNNEL_RETURN_IF_ERROR(ValidateStateMessages(initial));
  }

  // With initial records or a close, the stream is created marked `creating` (invisible to
  // other requests), and the commit of those records clears the mark: nothing can be appended
  // before them, even through another node.
  const bool initial_commit = !inherited.records.empty() || !initial.empty() || spec.closed;
  std::string base_attrs;
  if (spec.compaction) {
    RUNNEL_ASSIGN_OR_RETURN(base_attrs, compaction::WithConfig("", *spec.compaction));
  }
  RUNNEL_ASSIGN_OR_RETURN(std::string final_attrs,
                          attributes::Set(base_attrs, Meta::kAttributeKey, meta.Stored()));
  CreateStreamOptions options;
  options.content_type = content_type;
  options.retention = spec.retention;
  options.attributes = final_attrs;
  if (initial_commit) {
    Meta creating = meta;
    creating.creating = true;
    RUNNEL_ASSIGN_OR_RETURN(options.attributes,
                            attributes::Set(base_attrs, Meta::kAttributeKey, creating.Stored()));
  }
  options.first_offset = inherited.first_offset;
  Status made = registry_.CreateStream(scope, name, options);
  if (made.code() == StatusCode::kAlreadyExists && !after_race) {
    // Created meanwhile by another creator, perhaps still committing its initial records (then
    // Lookup answers not found): wait for it, then answer as a re-create does.
    for (uint64_t waited = 0; waited < kCreateRaceWaitMs; waited += 20) {
      auto visible = Lookup(scope, name);
      if (visible.ok() || visible.status().code() != StatusCode::kNotFound) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return CreateOnce(scope, name, spec, /*after_race=*/true, refusal);
  }
  RUNNEL_RETURN_IF_ERROR(made);
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, registry_.store().GetStream(scope.Label(), name));
  Touch(info, meta);

  if (source) {
    // Listed after it exists, under its id (see Remove); listing it twice keeps one entry.
    const StreamId fork = info.id;
    Status listed = UpdateMetaIf(source->info.id, [&](Meta* m) {
      auto at = std::lower_bound(m->fork_ids.begin(), m->fork_ids.end(), fork);
      if (at != m->fork_ids.end() && *at == fork) return Status::OK();
      if (m->Forks() >= options_.max_forks_per_stream) return TooManyForks(spec.fork->name);
      m->fork_ids.insert(at, fork);
      return Status::OK();
    });
    if (!listed.ok()) {
      // Not answered as created, so not left behind. Nothing to unlist, unless the listing
      // committed after all (an unknown outcome): that entry is then found dead later.
      Status removed = registry_.store().DeleteStream(fork);
      (void)removed;  // if that fails too, the stale creating mark or a DELETE removes it
      return listed;
    }
  }
  Created out;
  out.created = true;
  out.tail_position = TailPosition(info);
  out.closed = info.closed;
  out.info = info;
  if (!initial_commit) return out;
  // Inherited records and the initial body commit as one atomic batch, with the close.
  AppendRequest append;
  append.stream = info.id;  // the stream just created, not one re-created since under its name
  append.records = std::move(inherited.records);
  append.records.insert(append.records.end(), std::make_move_iterator(initial.begin()),
                        std::make_move_iterator(initial.end()));
  append.now_ms = registry_.clock().NowMs();
  append.close = spec.closed;
  append.attributes = std::move(final_attrs);
  append.expected_attributes = std::move(options.attributes);
  RUNNEL_ASSIGN_OR_RETURN(AppendResult committed,
                          registry_.store().AppendAndWait(std::move(append)));
  out.tail_position = committed.next_offset - 1;
  out.closed = spec.closed;
  return out;
}

}  // namespace runnel::protocol
