// The append decision (PlanAppend, DecideAppend, AppendRules: applied inside the store's atomic
// step) and the catalog's steps around it: the lookup and the append cache, and reading the
// store's result (Catalog::PrepareAppend, Catalog::FinishAppend).
#include "core/protocol/append.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/attributes.h"
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

AppendOutcome Retry() {
  AppendOutcome o;
  o.kind = Kind::kRetry;
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

AppendPlan PlanAppend(const Found& found, AppendSpec spec, size_t max_messages,
                      AppendRequest* write) {
  AppendPlan plan;
  plan.close = spec.close;
  plan.has_body = !spec.body.empty();
  plan.stream_seq = std::move(spec.stream_seq);
  plan.producer = spec.producer;
  plan.expected_position = spec.expected_position;
  // SEMANTICS E5: the body's media type is the stream's (which never changes).
  if (!plan.has_body && !plan.close) {
    plan.body_refusal = std::make_shared<const AppendOutcome>(
        Refused(Status::InvalidArgument("an append needs a body")));
  } else if (plan.has_body && spec.content_type.empty()) {
    plan.body_refusal = std::make_shared<const AppendOutcome>(
        Refused(Status::InvalidArgument("a content type (Content-Type) is required")));
  } else if (plan.has_body && !SameContentType(spec.content_type, found.info.spec.content_type)) {
    plan.body_refusal = std::make_shared<const AppendOutcome>(
        Refused(Status::Conflict("the content type does not match the stream's", 0, 0)));
  }
  if (!plan.body_refusal) {
    if (auto refused = Records(found, std::move(spec.body), max_messages, &write->records)) {
      plan.records_refusal = std::make_shared<const AppendOutcome>(std::move(*refused));
    }
  }
  write->stream = found.info.id;
  write->close = spec.close;
  write->producer = std::move(spec.producer);
  // Checked by the rules inside the store's atomic step; the store's own condition keeps a
  // store that places records without reading the tail (PostgreSQL's optimistic writes) from
  // taking such an append on a remembered tail.
  if (spec.expected_position) write->expected_offset = *spec.expected_position + 1;
  return plan;
}

// The rules in the protocol's order; each step cites its rule. About 95 lines: one straight
// sequence of checks, each answering or falling through to the next.
std::optional<AppendOutcome> DecideAppend(const Found& found, const AppendState& now,
                                          const AppendPlan& plan, AppendRequest* write) {
  // The metadata as stored now: usually what the lookup parsed.
  std::optional<Meta> reparsed;
  if (now.attributes != found.info.spec.attributes) reparsed = Meta::Parse(now.attributes);
  const Meta& meta = reparsed ? *reparsed : found.meta;
  Catalog::Refusal kind = Catalog::Refusal::kNone;
  if (Status refused = Catalog::RefuseWrite(meta, found.info.spec.name, &kind); !refused.ok()) {
    return Refused(refused, kind == Catalog::Refusal::kSoftDeleted ? Refusal::kSoftDeleted
                                                                   : Refusal::kChannel);
  }
  std::optional<ProducerState> stored;
  std::optional<ProducerCheck> check;
  if (plan.producer) {
    if (plan.producer->producer_id.empty()) {
      return Refused(Status::InvalidArgument("a producer id must be non-empty"));
    }
    if (now.producer) stored = ProducerState{{}, now.producer->first, now.producer->second, 0};
    check = CheckProducer(stored, plan.producer->epoch, plan.producer->seq);
  }
  const uint64_t tail = now.next_offset - 1;
  // A closed stream takes nothing (SEMANTICS E10); a retried close or a producer's duplicate
  // still succeeds.
  if (now.closed) {
    if (check && check->verdict == ProducerVerdict::kDuplicate) {
      return Duplicate(tail, true, stored->epoch, stored->seq);
    }
    if (!plan.has_body && plan.close) return Answer(Kind::kNoop, tail, true);
    AppendOutcome o = Refused(Status::FailedPrecondition("stream is closed"));
    o.tail_position = tail;
    o.closed = true;
    return o;
  }
  if (plan.body_refusal) return *plan.body_refusal;  // E5
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
            Status::Conflict("producer sequence gap", check->expected_seq, plan.producer->seq));
        o.expected_seq = check->expected_seq;
        o.received_seq = plan.producer->seq;
        return o;
      }
    }
  }
  // SEMANTICS E4: valid UTF-8 (it is stored in JSON metadata), greater than the last one.
  std::optional<std::string> attributes;
  if (plan.stream_seq) {
    if (Status valid = ValidateStreamSeq(*plan.stream_seq); !valid.ok()) return Refused(valid);
    if (Status next = CheckStreamSeq(meta.stream_seq, *plan.stream_seq); !next.ok()) {
      return Refused(next);
    }
    // The last Stream-Seq commits with the records, so a crash cannot separate them.
    Meta after = meta;
    after.stream_seq = plan.stream_seq;
    auto set = attributes::Set(now.attributes, Meta::kAttributeKey, after.Stored());
    if (!set.ok()) return Refused(set.status());
    attributes = std::move(*set);
  }
  // SEMANTICS E11: a conditional append starts at the tail.
  if (plan.expected_position) {
    if (Status at = CheckExpectedPosition(*plan.expected_position, now.next_offset); !at.ok()) {
      AppendOutcome o = Refused(at);
      o.tail_position = tail;
      return o;
    }
  }
  if (plan.records_refusal) return *plan.records_refusal;  // E6
  write->attributes = std::move(attributes);
  return std::nullopt;
}

Status AppendRules::Admit(const AppendState& state, AppendRequest* request) {
  std::optional<AppendOutcome> decided = DecideAppend(*found_, state, plan_, request);
  // An answer writes nothing; FinishAppend gives it when the append ends with this status.
  if (!decided) {
    answer_.reset();
    returned_ = Status::OK();
    return returned_;
  }
  returned_ = decided->kind == Kind::kRefused ? decided->status
                                              : Status::AlreadyExists("answered without a write");
  answer_ = std::make_unique<const AppendOutcome>(std::move(*decided));
  return returned_;
}

// ---------------------------------------------------------------------------------------------
// The append cache

namespace {

// Whether appends may take the stream from this entry (see Catalog::Cached).
bool FitForAppends(const Found& f) {
  return !f.meta.soft_deleted && !f.meta.channel && !f.meta.creating && !f.info.closed &&
         f.info.EverHeldARecord();
}

}  // namespace

std::shared_ptr<const Found> Catalog::Cached(const std::string& key) {
  if (options_.append_cache_streams == 0) return nullptr;
  auto entry = registry_.stream_cache().Get(key);
  // The registry remembers any stream it looked up; only some are fit.
  return entry && FitForAppends(*entry) ? entry : nullptr;
}

void Catalog::Remember(const std::string& key, std::shared_ptr<const Found> found) {
  if (options_.append_cache_streams == 0 || !FitForAppends(*found)) return;
  registry_.stream_cache().Put(key, std::move(found));
}

void Catalog::Forget(const std::string& key) {
  registry_.stream_cache().Erase(key);
}

void Catalog::ForgetCached(const StreamScope& scope, std::string_view name) {
  Forget(internal::StreamCache::Key(scope, name));
}

bool Catalog::AppendIsCached(const StreamScope& scope, std::string_view name) {
  return Cached(internal::StreamCache::Key(scope, name)) != nullptr;
}

// ---------------------------------------------------------------------------------------------
// Before and after the write

PreparedAppend Catalog::PrepareAppend(const StreamScope& scope, std::string_view name,
                                      AppendSpec spec, bool fresh) {
  PreparedAppend p;
  const bool cacheable = options_.append_cache_streams > 0;
  const std::string key = cacheable ? internal::StreamCache::Key(scope, name) : std::string();
  if (cacheable && !fresh) {
    p.found = Cached(key);
    // Expiry removes the stream, and that is decided from a fresh lookup (the caller may be a
    // thread that must not wait for the store).
    if (p.found && Expired(p.found->info, p.found->meta)) {
      Forget(key);
      p.answer = Retry();
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
    if (cacheable) Remember(key, p.found);
  }
  const Found& found = *p.found;
  if (!found.meta.soft_deleted && !found.meta.channel) Touch(found.info, found.meta);
  AppendPlan plan = PlanAppend(found, std::move(spec), options_.max_append_messages, &p.request);
  for (const AppendRecord& r : p.request.records) p.bytes += r.payload.size();
  p.request.now_ms = registry_.clock().NowMs();
  p.rules = std::make_shared<AppendRules>(p.found, std::move(plan));
  p.request.guard = p.rules.get();
  return p;
}

AppendOutcome Catalog::FinishAppend(const PreparedAppend& p, Result<AppendResult> result) {
  // The rules answered inside the store's atomic step: nothing was written.
  if (const AppendOutcome* answer = p.rules->AnswerFor(result)) return *answer;
  const AppendPlan& plan = p.rules->plan();
  if (result.ok()) {
    AppendOutcome o = Answer(Kind::kAppended, result->next_offset - 1, plan.close);
    o.wrote_records = plan.has_body;
    if (plan.producer) {
      o.producer_epoch = plan.producer->epoch;
      o.producer_seq = plan.producer->seq;
    }
    return o;
  }
  const StatusCode code = result.status().code();
  if (p.from_cache() && code == StatusCode::kNotFound) {
    // Decided from a remembered lookup, and that stream was deleted meanwhile: a fresh lookup
    // finds what the name holds now.
    Forget(p.cache_key);
    return Retry();
  }
  AppendOutcome o = Refused(result.status());
  if (code == StatusCode::kConflict || code == StatusCode::kFailedPrecondition) {
    // The store's own conditions (a shared store's slot taken through another node): where
    // the stream stands now.
    if (auto info = registry_.store().GetStreamById(p.found->info.id); info.ok()) {
      o.tail_position = TailPosition(*info);
      o.closed = info->closed;
    }
  }
  return o;
}

}  // namespace runnel::protocol
