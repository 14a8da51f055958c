// The append decision (DecideAppend) and the catalog's steps around it: the lookup and the
// append cache, the producer's stored state, Stream-Seq's attributes, and reading the store's
// result (Catalog::PrepareAppend, Catalog::FinishAppend).
#include "core/protocol/append.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/protocol/catalog.h"
#include "core/protocol/json_messages.h"
#include "core/protocol/rules.h"
#include "core/stream_cache.h"

namespace runnel::protocol {

namespace {

using Kind = AppendOutcome::Kind;
using Refusal = AppendOutcome::Refusal;

AppendOutcome Refused(Status status, Refusal refusal = Refusal::kNone) {
  AppendOutcome o;
  o.kind = Kind::kRefused;
  o.refusal = refusal;
  o.status = std::move(status);
  return o;
}

AppendOutcome Answer(Kind kind, uint64_t tail, bool closed) {
  AppendOutcome o;
  o.kind = kind;
  o.tail_position = tail;
  o.closed = closed;
  return o;
}

AppendOutcome Retry(bool race) {
  AppendOutcome o;
  o.kind = Kind::kRetry;
  o.race = race;
  return o;
}

AppendOutcome Duplicate(uint64_t tail, bool closed, uint64_t epoch, uint64_t seq) {
  AppendOutcome o = Answer(Kind::kDuplicate, tail, closed);
  o.producer_epoch = epoch;
  o.producer_seq = seq;
  return o;
}

// The body as records: one, or for a JSON-mode stream its messages (SEMANTICS E6), each a
// State Protocol message on a compacted stream.
std::optional<AppendOutcome> Records(const Found& found, std::string body, size_t max_messages,
                                     std::vector<AppendRecord>* records) {
  if (!body.empty()) {
    if (IsJsonContentType(found.info.spec.content_type)) {
      auto messages = SplitJsonMessages(body, /*allow_empty_array=*/false, max_messages);
      if (!messages.ok()) {
        const bool too_many = messages.status().code() == StatusCode::kResourceExhausted;
        return Refused(messages.status(), too_many ? Refusal::kPayload : Refusal::kNone);
      }
      records->reserve(messages->size());
      for (std::string& m : *messages) records->push_back(AppendRecord{std::nullopt, std::move(m)});
    } else {
      records->push_back(AppendRecord{std::nullopt, std::move(body)});
    }
  }
  if (found.meta.compaction) {
    if (Status valid = ValidateStateMessages(*records); !valid.ok()) return Refused(valid);
  }
  return std::nullopt;
}

}  // namespace

// The rules in the protocol's order; each step cites its rule. About 95 lines: one straight
// sequence of checks, each answering or falling through to the next.
std::optional<AppendOutcome> DecideAppend(const Found& found,
                                          const std::optional<ProducerState>& stored,
                                          AppendSpec spec, size_t max_messages,
                                          AppendRequest* write) {
  const StreamInfo& info = found.info;
  Catalog::Refusal kind = Catalog::Refusal::kNone;
  if (Status refused = Catalog::RefuseWrite(found, info.spec.name, &kind); !refused.ok()) {
    return Refused(refused, kind == Catalog::Refusal::kSoftDeleted ? Refusal::kSoftDeleted
                                                                   : Refusal::kChannel);
  }
  std::optional<ProducerCheck> check;
  if (spec.producer) {
    if (spec.producer->producer_id.empty()) {
      return Refused(Status::InvalidArgument("a producer id must be non-empty"));
    }
    check = CheckProducer(stored, spec.producer->epoch, spec.producer->seq);
  }
  const uint64_t tail = TailPosition(info);
  // A closed stream takes nothing (SEMANTICS E10); a retried close or a producer's duplicate
  // still succeeds.
  if (info.closed) {
    if (check && check->verdict == ProducerVerdict::kDuplicate) {
      return Duplicate(tail, true, stored->epoch, stored->seq);
    }
    if (spec.body.empty() && spec.close) return Answer(Kind::kNoop, tail, true);
    AppendOutcome o = Refused(Status::FailedPrecondition("stream is closed"));
    o.tail_position = tail;
    o.closed = true;
    return o;
  }
  if (spec.body.empty() && !spec.close) {
    return Refused(Status::InvalidArgument("an append needs a body"));
  }
  // SEMANTICS E5: the body's media type is the stream's.
  if (!spec.body.empty()) {
    if (spec.content_type.empty()) {
      return Refused(Status::InvalidArgument("a content type (Content-Type) is required"));
    }
    if (!SameContentType(spec.content_type, info.spec.content_type)) {
      return Refused(Status::Conflict("the content type does not match the stream's", 0, 0));
    }
  }
  // SEMANTICS E9: idempotent producers.
  if (check) {
    switch (check->verdict) {
      case ProducerVerdict::kAccept: break;
      case ProducerVerdict::kDuplicate: return Duplicate(tail, false, stored->epoch, stored->seq);
      case ProducerVerdict::kStaleEpoch: {
        AppendOutcome o = Refused(Status::PermissionDenied("stale producer epoch"));
        o.producer_epoch = stored->epoch;
        return o;
      }
      case ProducerVerdict::kBadNewEpoch:
        return Refused(
            Status::InvalidArgument("a new producer epoch must start at Producer-Seq 0"));
      case ProducerVerdict::kGap: {
        AppendOutcome o = Refused(
            Status::Conflict("producer sequence gap", check->expected_seq, spec.producer->seq));
        o.expected_seq = check->expected_seq;
        o.received_seq = spec.producer->seq;
        return o;
      }
    }
  }
  // SEMANTICS E4: valid UTF-8 (it is stored in JSON metadata), greater than the last one.
  if (spec.stream_seq) {
    if (Status valid = ValidateStreamSeq(*spec.stream_seq); !valid.ok()) return Refused(valid);
    if (Status next = CheckStreamSeq(found.meta.stream_seq, *spec.stream_seq); !next.ok()) {
      return Refused(next);
    }
  }
  // SEMANTICS E11: a conditional append starts at the tail.
  if (spec.expected_position) {
    if (Status at = CheckExpectedPosition(*spec.expected_position, info); !at.ok()) {
      AppendOutcome o = Refused(at);
      o.tail_position = tail;
      return o;
    }
  }
  std::vector<AppendRecord> records;
  if (auto refused = Records(found, std::move(spec.body), max_messages, &records)) return refused;
  write->stream = info.id;
  write->close = spec.close;
  write->producer = std::move(spec.producer);
  if (spec.expected_position && !records.empty()) {
    write->expected_offset = *spec.expected_position + 1;
  }
  write->records = std::move(records);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The append cache

namespace {

// Whether a plain append may be decided from this entry (see Catalog::Cached).
bool FitForPlainAppends(const Found& f) {
  return !f.meta.soft_deleted && !f.meta.channel && !f.meta.creating && !f.info.closed &&
         f.info.EverHeldARecord();
}

}  // namespace

std::shared_ptr<const Found> Catalog::Cached(const std::string& key) {
  if (options_.append_cache_streams == 0) return nullptr;
  auto entry = registry_.stream_cache().Get(key);
  // The registry remembers any stream it looked up; only some are fit.
  return entry && FitForPlainAppends(*entry) ? entry : nullptr;
}

void Catalog::Remember(const std::string& key, std::shared_ptr<const Found> found) {
  if (options_.append_cache_streams == 0 || !FitForPlainAppends(*found)) return;
  registry_.stream_cache().Put(key, std::move(found));
}

void Catalog::Forget(const std::string& key) {
  registry_.stream_cache().Erase(key);
}

void Catalog::ForgetCached(const StreamScope& scope, std::string_view name) {
  Forget(internal::StreamCache::Key(scope, name));
}

bool Catalog::AppendIsCached(const StreamScope& scope, std::string_view name, bool plain) {
  return plain && Cached(internal::StreamCache::Key(scope, name)) != nullptr;
}

// ---------------------------------------------------------------------------------------------
// Before and after the write

PreparedAppend Catalog::PrepareAppend(const StreamScope& scope, std::string_view name,
                                      AppendSpec spec, bool fresh, bool retry_race) {
  PreparedAppend p;
  p.retry_race = retry_race;
  const bool cacheable = options_.append_cache_streams > 0;
  const std::string key = cacheable ? internal::StreamCache::Key(scope, name) : std::string();
  if (cacheable && !spec.Plain()) Forget(key);  // it may change what the entry holds
  if (cacheable && spec.Plain() && !fresh) {
    p.found = Cached(key);
    // Expiry removes the stream, and a refusal from a remembered lookup is decided again from
    // a fresh one (the caller may be a thread that must not wait for the store).
    if (p.found && Expired(p.found->info, p.found->meta)) {
      Forget(key);
      p.answer = Retry(false);
      return p;
    }
    if (p.found) p.cache_key = key;
  }
  if (!p.found) {
    auto looked_up = Lookup(scope, name);
    if (!looked_up.ok()) {
      p.answer = Refused(looked_up.status());
      return p;
    }
    p.found = std::make_shared<const Found>(std::move(*looked_up));
    if (cacheable && spec.Plain()) Remember(key, p.found);
  }
  const Found& found = *p.found;
  if (!found.meta.soft_deleted && !found.meta.channel) Touch(found.info, found.meta);
  std::optional<ProducerState> stored;
  if (spec.producer && !spec.producer->producer_id.empty()) {
    auto state = registry_.store().GetProducer(found.info.id, spec.producer->producer_id);
    if (!state.ok()) {
      p.answer = Refused(state.status());
      return p;
    }
    stored = std::move(*state);
  }
  std::optional<std::string> stream_seq = spec.stream_seq;
  p.close = spec.close;
  p.producer = spec.producer;
  p.answer = DecideAppend(found, stored, std::move(spec), options_.max_append_messages, &p.request);
  if (p.answer) {
    if (p.from_cache() && p.answer->kind == Kind::kRefused) {
      Forget(key);
      p.answer = Retry(false);
    }
    return p;
  }
  p.wrote_records = !p.request.records.empty();
  for (const AppendRecord& r : p.request.records) p.bytes += r.payload.size();
  p.request.now_ms = registry_.clock().NowMs();
  if (stream_seq) {
    // The last Stream-Seq commits with the records, so a crash cannot separate them (E4).
    auto meta_append = BeginMetaAppend(found.info.id, *stream_seq);
    if (!meta_append.ok()) {
      p.answer = Refused(meta_append.status());
      return p;
    }
    p.meta_in_flight = true;
    p.request.attributes = std::move(meta_append->attributes);
    p.request.expected_attributes = std::move(meta_append->read);
  } else if (!found.info.EverHeldARecord()) {
    // A stream that never held a record may be adopted by a channel at any moment (its tag is
    // a compare-and-set on the attributes and the tail): the write expects the untagged
    // attributes it was decided against, so it cannot land in a partition tagged meanwhile.
    p.request.expected_attributes = found.info.spec.attributes;
  }
  p.expects_attributes = p.request.expected_attributes.has_value();
  return p;
}

AppendOutcome Catalog::FinishAppend(const PreparedAppend& p, Result<AppendResult> result) {
  const StreamId id = p.found->info.id;
  if (p.meta_in_flight) MetaAppendDone(id);
  if (result.ok()) {
    AppendOutcome o = Answer(Kind::kAppended, result->next_offset - 1, p.close);
    o.wrote_records = p.wrote_records;
    if (p.producer) {
      o.producer_epoch = p.producer->epoch;
      o.producer_seq = p.producer->seq;
    }
    return o;
  }
  const StatusCode code = result.status().code();
  // Nothing was written in any of these cases.
  if (p.expects_attributes && p.retry_race && code == StatusCode::kConflict) {
    // The attributes (or the tail) changed after they were read: decide again from what is
    // stored now.
    return Retry(true);
  }
  if (p.from_cache() &&
      (code == StatusCode::kNotFound || code == StatusCode::kFailedPrecondition)) {
    // Decided from a remembered lookup, and the stream was deleted, closed or soft-deleted
    // meanwhile: a fresh lookup gives the precise answer.
    Forget(p.cache_key);
    return Retry(false);
  }
  Store& store = registry_.store();
  auto tail_now = [&]() -> std::optional<uint64_t> {
    auto info = store.GetStreamById(id);
    if (!info.ok()) return std::nullopt;
    return TailPosition(*info);
  };
  if (p.producer && code == StatusCode::kAlreadyExists) {
    // A store shared by several nodes found this (epoch, seq) committed meanwhile through
    // another node: the duplicate answer. Its seq is the highest accepted in the epoch (the
    // other node may have moved past this one's).
    uint64_t highest = p.producer->seq;
    if (auto stored = store.GetProducer(id, p.producer->producer_id);
        stored.ok() && stored->has_value() && (*stored)->epoch == p.producer->epoch) {
      highest = std::max(highest, (*stored)->seq);
    }
    AppendOutcome o = Duplicate(0, false, p.producer->epoch, highest);
    o.tail_position = tail_now();
    return o;
  }
  AppendOutcome o = Refused(result.status());
  if (code == StatusCode::kConflict) {
    o.tail_position = tail_now();  // a conditional append lost a race: where it must start now
  } else if (code == StatusCode::kFailedPrecondition) {
    o.closed = true;  // closed by a concurrent request after the decision
    o.tail_position = tail_now();
  }
  return o;
}

}  // namespace runnel::protocol
