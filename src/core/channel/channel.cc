#include "runnel/channel.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <span>
#include <string>
#include <utility>

#include "base/log.h"
#include "base/retry.h"
#include "core/attributes.h"
#include "core/channel/checkpoint_format.h"
#include "core/channel/envelope_format.h"
#include "core/channel/key_index.h"

namespace runnel {
namespace {

// The partition tag lives under this key of the stream's attributes (see core/attributes.h).
constexpr std::string_view kAttributeKey = DurableChannel::kAttributeKey;

// The tag's JSON text; keys in sorted order, as a JSON library would print them back.
std::string PartitionTag(size_t partition_count, size_t partition) {
  return "{\"partition\":" + std::to_string(partition) +
         ",\"partitions\":" + std::to_string(partition_count) + "}";
}

// The tag of the companion stream holding the head checkpoint (V3).
std::string CheckpointTag(size_t partition_count) {
  return "{\"checkpoint\":true,\"partitions\":" + std::to_string(partition_count) + "}";
}

// The partition count of a tag, or 0 when the tag is malformed.
size_t TagPartitionCount(std::string_view tag) {
  constexpr std::string_view kField = "\"partitions\":";
  const size_t at = tag.find(kField);
  if (at == std::string_view::npos) return 0;
  size_t count = 0;
  size_t i = at + kField.size();
  for (; i < tag.size() && tag[i] >= '0' && tag[i] <= '9'; ++i) {
    if (count > (~size_t{0} - 9) / 10) return 0;
    count = count * 10 + static_cast<size_t>(tag[i] - '0');
  }
  return count;
}

Status ConfigError(std::string_view what) {
  return Status::InvalidArgument("ConfigError: " + std::string(what));
}

// Whether an untagged stream may be adopted as partition `key`: only if it never held a record
// (its rows would not be envelopes) and has no retention caps (a partition keeps every message;
// idempotency keys are resolved from its records).
// `what` names the role: "a partition of a runnel channel" or "a channel head checkpoint".
Status CheckAdoptable(const StreamInfo& info, const std::string& key, std::string_view what) {
  if (info.EverHeldARecord()) {
    return ConfigError("stream " + key + " exists, holds records and is not " + std::string(what));
  }
  const StreamRetention& r = info.spec.retention;
  if (r.max_events || r.max_age_ms || r.max_bytes) {
    return ConfigError("stream " + key + " exists with retention caps and is not " +
                       std::string(what) + " (a channel keeps every record)");
  }
  return Status::OK();
}

constexpr std::string_view kPartitionRole = "a partition of a runnel channel";
constexpr std::string_view kCheckpointRole = "a channel head checkpoint";

// A channel stream as opened by OpenTagged.
struct TaggedStream {
  StreamInfo info;
  // The channel tag it carries (the new one when it was created or adopted just now); nullopt
  // when its attributes do not parse (it was then left alone).
  std::optional<std::string> tag;
};

// One attempt of OpenTagged; kConflict when the stream changed between its read and the tag.
Result<TaggedStream> OpenTaggedOnce(StreamRegistry& registry, const StreamScope& scope,
                                    const std::string& key, const std::string& tag,
                                    std::string_view role, const std::string& what) {
  Store& store = registry.store();
  const std::string ns = scope.Label();
  auto info = store.GetStream(ns, key);
  if (!info.ok() && info.status().code() == StatusCode::kNotFound) {
    CreateStreamOptions create;
    RUNNEL_ASSIGN_OR_RETURN(create.attributes,
                            attributes::Set("", DurableChannel::kAttributeKey, tag));
    Status created = registry.CreateStream(scope, key, create);
    if (!created.ok() && created.code() != StatusCode::kAlreadyExists) {
      return created.Annotate("StoreError: creating " + what);
    }
    info = store.GetStream(ns, key);
  }
  if (!info.ok()) return info.status().Annotate("StoreError: opening " + key);
  auto found = attributes::Get(info->spec.attributes, DurableChannel::kAttributeKey);
  if (!found.ok()) return TaggedStream{std::move(*info), std::nullopt};
  if (found->has_value()) return TaggedStream{std::move(*info), std::move(**found)};
  // Untagged: checked again here (it may have changed since the caller's first look).
  RUNNEL_RETURN_IF_ERROR(CheckAdoptable(*info, key, role));
  RUNNEL_ASSIGN_OR_RETURN(std::string tagged, attributes::Set(info->spec.attributes,
                                                              DurableChannel::kAttributeKey, tag));
  RUNNEL_RETURN_IF_ERROR(store
                             .UpdateStream(info->id, info->spec.retention, tagged,
                                           info->spec.attributes, info->next_offset)
                             .Annotate("StoreError: tagging " + key));
  return TaggedStream{std::move(*info), tag};
}

// Opens the stream `key` of the channel with the tag `tag` for `role`: creates it tagged when
// it does not exist (another instance may create it in between; that one is then opened like
// any other); adopts an untagged one (CheckAdoptable, then tagged in place, keeping other
// layers' attributes). `what` names it in store errors.
//
// The tag is a compare-and-set on both the attributes and the next offset that CheckAdoptable
// saw: a plain append committing between the check and the tag (through this process or another
// sharing the store) fails the tag, and the stream is looked at again, so no record that is not
// an envelope can sit under a partition's tag. (Appends to a stream that never held a record
// expect its untagged attributes in turn, so one tagged first is refused them.)
Result<TaggedStream> OpenTagged(StreamRegistry& registry, const StreamScope& scope,
                                const std::string& key, const std::string& tag,
                                std::string_view role, const std::string& what) {
  return RetryOnConflict([&] { return OpenTaggedOnce(registry, scope, key, tag, role, what); });
}

std::string Where(std::string_view stream_key, uint64_t sequence) {
  return "stream " + std::string(stream_key) + " sequence " + std::to_string(sequence) +
         " (offset " + std::to_string(sequence + 1) + ")";
}

Status ValidateEnvelope(const MessageEnvelope& e) {
  auto check = [](std::string_view field, std::string_view value) -> Status {
    if (value.size() > channel::kMaxFieldLength) {
      return Status::InvalidArgument(std::string(field) + " is longer than 2^32-1 bytes");
    }
    if (!channel::IsValidUtf8(value)) {
      return Status::InvalidArgument(std::string(field) + " is not valid UTF-8");
    }
    return Status::OK();
  };
  RUNNEL_RETURN_IF_ERROR(check("publisher_id", e.publisher_id));
  if (e.idempotency_key) RUNNEL_RETURN_IF_ERROR(check("idempotency_key", *e.idempotency_key));
  if (e.key) RUNNEL_RETURN_IF_ERROR(check("key", *e.key));
  if (e.causal_context && e.causal_context->parent_id) {
    RUNNEL_RETURN_IF_ERROR(check("parent_id", *e.causal_context->parent_id));
  }
  if (e.payload.size() > channel::kMaxFieldLength) {
    return Status::InvalidArgument("payload is longer than 2^32-1 bytes");
  }
  return Status::OK();
}

size_t PartitionOf(const PartitionKeyFn& fn, size_t count, const MessageEnvelope& e) {
  if (count <= 1 || !fn) return 0;
  return static_cast<size_t>(fn(e) % count);
}

Status EnvelopeErrorAt(std::string_view stream_key, uint64_t sequence, const Status& decode) {
  std::string msg(decode.message());
  constexpr std::string_view kPrefix = "EnvelopeError: ";
  if (msg.rfind(kPrefix, 0) == 0) msg.erase(0, kPrefix.size());
  return Status::Corruption("EnvelopeError: " + Where(stream_key, sequence) + ": " + msg);
}

}  // namespace

// ---- DurabilityConfig ----

Status DurabilityConfig::Validate() const {
  if (partition_count == 0) return ConfigError("partition_count must be at least 1");
  if (mode == DurabilityMode::kDurableDedup && dedup_ttl_ms == 0) {
    return ConfigError("DurableDedup needs a dedup_ttl greater than 0");
  }
  if (checkpoint_policy.kind == CheckpointPolicy::Kind::kPerBatch && checkpoint_policy.batch == 0) {
    return ConfigError("checkpoint policy PerBatch(0) is not allowed");
  }
  return Status::OK();
}

// ---- KeyLookup ----

KeyLookup::KeyLookup(StreamRegistry registry, StreamScope scope,
                     std::vector<std::string> stream_keys)
    : registry_(std::move(registry)),
      scope_(std::move(scope)),
      stream_keys_(std::move(stream_keys)) {}

Result<AppendResolution> KeyLookup::Find(std::string_view key,
                                         const std::vector<uint64_t>& from) const {
  Store& store = registry_.store();
  for (size_t p = 0; p < stream_keys_.size(); ++p) {
    auto info = store.GetStream(scope_.Label(), stream_keys_[p]);
    if (!info.ok()) return info.status().Annotate("StoreError: " + stream_keys_[p]);
    uint64_t next = (p < from.size() ? from[p] : 0) + 1;
    for (;;) {
      auto rows =
          store.Read(info->id, next, DurableChannel::kReadBatchSize, StreamRegistry::kMaxReadBytes);
      if (!rows.ok()) return rows.status().Annotate("StoreError: " + stream_keys_[p]);
      if (rows->empty()) break;
      for (const StoredRecord& r : *rows) {
        auto env = DecodeEnvelope(r.payload);
        if (!env.ok()) return EnvelopeErrorAt(stream_keys_[p], r.offset - 1, env.status());
        if (env->idempotency_key && *env->idempotency_key == key) {
          return AppendResolution::Committed(p, r.offset - 1);
        }
        next = r.offset + 1;
      }
    }
  }
  return AppendResolution::Absent();
}

// ---- DurableChannel: construction and recovery ----

DurableChannel::DurableChannel() : index_(std::make_unique<channel::KeyIndex>()) {}
DurableChannel::DurableChannel(DurableChannel&&) noexcept = default;
DurableChannel& DurableChannel::operator=(DurableChannel&&) noexcept = default;

DurableChannel::~DurableChannel() {
  if (!live_.value) return;
  // A clean stop (V3): record what was indexed since the last record.
  Status s = RecordCheckpoint();
  if (!s.ok()) Warn("head checkpoint at close not recorded: " + s.ToString());
}

void DurableChannel::Warn(const std::string& sentence) const {
  if (warn_) {
    warn_(sentence);
  } else {
    LogF(LogLevel::kWarn, "channel %s: %s", channel_id_.c_str(), sentence.c_str());
  }
}

Result<DurableChannel> DurableChannel::Open(std::string channel_id, size_t partition_count,
                                            StreamRegistry registry, ChannelOptions options) {
  return OpenImpl(std::move(channel_id), partition_count, std::move(registry), std::move(options),
                  std::nullopt);
}

Result<DurableChannel> DurableChannel::WithPartitionKey(std::string channel_id,
                                                        size_t partition_count,
                                                        StreamRegistry registry, PartitionKeyFn fn,
                                                        ChannelOptions options) {
  options.partition_key = std::move(fn);
  return OpenImpl(std::move(channel_id), partition_count, std::move(registry), std::move(options),
                  std::nullopt);
}

Result<DurableChannel> DurableChannel::FromRecoveredSequences(std::string channel_id,
                                                              size_t partition_count,
                                                              StreamRegistry registry,
                                                              std::vector<uint64_t> next_sequences,
                                                              ChannelOptions options) {
  if (partition_count != 0 && next_sequences.size() != partition_count) {
    return ConfigError("recovered " + std::to_string(next_sequences.size()) +
                       " next sequences for " + std::to_string(partition_count) + " partitions");
  }
  return OpenImpl(std::move(channel_id), partition_count, std::move(registry), std::move(options),
                  std::move(next_sequences));
}

Result<DurableChannel> DurableChannel::FromConfig(std::string channel_id,
                                                  const DurabilityConfig& config,
                                                  StreamRegistry registry, ChannelOptions options) {
  RUNNEL_RETURN_IF_ERROR(config.Validate());
  if (config.mode == DurabilityMode::kEphemeral) {
    return ConfigError("a DurableChannel cannot be opened with an ephemeral config");
  }
  options.checkpoint_policy = config.checkpoint_policy;
  return OpenImpl(std::move(channel_id), config.partition_count, std::move(registry),
                  std::move(options), std::nullopt);
}

Result<DurableChannel> DurableChannel::OpenImpl(
    std::string channel_id, size_t partition_count, StreamRegistry registry, ChannelOptions options,
    std::optional<std::vector<uint64_t>> next_sequences) {
  if (partition_count == 0) return ConfigError("partition_count must be at least 1");
  if (partition_count > kMaxPartitionCount) {
    return ConfigError("partition_count " + std::to_string(partition_count) +
                       " is above the limit of " + std::to_string(kMaxPartitionCount));
  }
  if (channel_id.empty()) return ConfigError("the channel id must not be empty");
  if (options.checkpoint_policy.kind == CheckpointPolicy::Kind::kPerBatch &&
      options.checkpoint_policy.batch == 0) {
    return ConfigError("checkpoint policy PerBatch(0) is not allowed");
  }
  DurableChannel ch;
  ch.channel_id_ = std::move(channel_id);
  ch.scope_ = std::move(options.scope);
  ch.registry_.emplace(std::move(registry));
  ch.partition_key_ = std::move(options.partition_key);
  ch.policy_ = options.checkpoint_policy;
  ch.check_all_partitions_ = options.check_all_partitions_for_keys;
  ch.warn_ = std::move(options.warn);
  for (size_t i = 0; i < partition_count; ++i) ch.stream_keys_.push_back(ch.StreamKeyFor(i));
  ch.checkpoint_key_ = ch.channel_id_ + std::string(channel::kCheckpointStreamSuffix);
  ch.stream_ids_.assign(partition_count, 0);
  ch.next_.assign(partition_count, 0);
  ch.scanned_.assign(partition_count, 0);
  ch.ck_head_.assign(partition_count, 0);
  ch.ck_fp_.assign(partition_count, 0);
  ch.last_fp_.assign(partition_count, 0);
  RUNNEL_RETURN_IF_ERROR(ch.OpenPartitions());
  ch.live_.value = true;
  if (next_sequences) {
    ch.next_ = std::move(*next_sequences);
  } else {
    ch.next_ = ch.scanned_;
  }
  return ch;
}

Status DurableChannel::OpenPartitions() {
  Store& store = registry_->store();
  const std::string ns = scope_.Label();
  // Refuse before creating anything: an untagged stream holding records (not envelopes) where a
  // partition belongs. Found only in the loop below, it would leave the partitions before it
  // created and tagged, half a channel.
  auto check_untagged = [&](const std::string& key, std::string_view role) -> Status {
    auto info = store.GetStream(ns, key);
    if (!info.ok()) return Status::OK();  // missing: created below
    auto found = attributes::Get(info->spec.attributes, kAttributeKey);
    if (!found.ok() || found->has_value()) return Status::OK();  // tagged: checked below
    return CheckAdoptable(*info, key, role);
  };
  for (const std::string& key : stream_keys_) {
    RUNNEL_RETURN_IF_ERROR(check_untagged(key, kPartitionRole));
  }
  RUNNEL_RETURN_IF_ERROR(check_untagged(checkpoint_key_, kCheckpointRole));
  for (size_t i = 0; i < stream_keys_.size(); ++i) {
    const std::string tag = PartitionTag(stream_keys_.size(), i);
    RUNNEL_ASSIGN_OR_RETURN(TaggedStream partition,
                            OpenTagged(*registry_, scope_, stream_keys_[i], tag, kPartitionRole,
                                       "partition " + stream_keys_[i]));
    if (!partition.tag) {
      return ConfigError("stream " + stream_keys_[i] +
                         " exists and is not a partition of a runnel channel");
    }
    if (*partition.tag != tag) {
      return ConfigError("stream " + stream_keys_[i] + " is tagged " + *partition.tag + ", not " +
                         tag + ": the channel was created with another partition count");
    }
    stream_ids_[i] = partition.info.id;
  }
  // The companion stream exists from the start, tagged, so that no one else can take its name
  // before the first record (a stream of that name not tagged as one refuses the channel).
  // An empty untagged one is adopted, as partitions are.
  RUNNEL_RETURN_IF_ERROR(OpenTagged(*registry_, scope_, checkpoint_key_,
                                    CheckpointTag(stream_keys_.size()), kCheckpointRole,
                                    checkpoint_key_)
                             .status());
  RUNNEL_ASSIGN_OR_RETURN(opened_from_checkpoint_, LoadCheckpoint());
  for (size_t i = 0; i < stream_keys_.size(); ++i) RUNNEL_RETURN_IF_ERROR(CatchUp(i));
  if (!opened_from_checkpoint_) {
    bool found_rows = false;
    for (uint64_t s : scanned_) found_rows = found_rows || s > 0;
    // Missing or refused: the full walk is done, record it as a new base (V3). (An empty
    // companion stream and empty partitions need no record.)
    if (found_rows || checkpoint_next_ > 1) {
      if (Status s = RecordCheckpoint(); !s.ok()) {
        Warn("head checkpoint after the full walk not recorded: " + s.ToString());
      }
    }
  }
  return Status::OK();
}

Status DurableChannel::CatchUp(size_t p) {
  Store& store = registry_->store();
  // The stream's extent first: any slot below its next offset that the reads below do not
  // return was removed by retention, and a scan could not see it either.
  auto info = store.GetStreamById(stream_ids_[p]);
  if (!info.ok()) return info.status().Annotate("StoreError: reading " + stream_keys_[p]);
  const uint64_t known_end = info->next_offset - 1;
  while (scanned_[p] < known_end) {
    auto rows =
        store.Read(stream_ids_[p], scanned_[p] + 1, kReadBatchSize, StreamRegistry::kMaxReadBytes);
    if (!rows.ok()) return rows.status().Annotate("StoreError: reading " + stream_keys_[p]);
    if (rows->empty()) break;
    for (const StoredRecord& r : *rows) {
      const uint64_t sequence = r.offset - 1;
      auto env = DecodeEnvelope(r.payload);
      if (!env.ok()) return EnvelopeErrorAt(stream_keys_[p], sequence, env.status());
      RUNNEL_RETURN_IF_ERROR(IndexRow(p, sequence, *env));
      scanned_[p] = sequence + 1;
    }
    last_fp_[p] = channel::RowFingerprint(rows->back().payload);
  }
  if (known_end > scanned_[p]) {
    // The rows up to the extent were removed by retention: nothing to fingerprint.
    scanned_[p] = known_end;
    last_fp_[p] = 0;
  }
  return Status::OK();
}

Status DurableChannel::IndexFull() const {
  return Status::ResourceExhausted("KeyIndexFull: channel " + channel_id_ + " indexes " +
                                   std::to_string(index_->size()) +
                                   " idempotency keys, the limit of one channel instance");
}

Status DurableChannel::IndexRow(size_t p, uint64_t sequence, const MessageEnvelope& envelope) {
  if (!envelope.idempotency_key) return Status::OK();
  if (!index_->Insert(channel::KeyIndex::Hash(*envelope.idempotency_key), p, sequence)) {
    return IndexFull();
  }
  return Status::OK();
}

Status DurableChannel::IndexLookup(std::string_view key, uint64_t hash,
                                   std::optional<AppendResolution>* found) const {
  found->reset();
  Store& store = registry_->store();
  Status error;
  index_->ForEachCandidate(hash, [&](size_t p, uint64_t sequence) {
    auto row = store.ReadAt(stream_ids_[p], sequence + 1);
    if (!row.ok()) {
      error = row.status().Annotate("StoreError: confirming an idempotency key at " +
                                    Where(stream_keys_[p], sequence));
      return true;
    }
    if (!row->has_value()) {
      // Retention removed the row after it was indexed: the key was seen there, and nothing
      // else can be there, so the hash match stands.
      *found = AppendResolution::Committed(p, sequence);
      return true;
    }
    auto env = DecodeEnvelope((*row)->payload);
    if (!env.ok()) {
      error = EnvelopeErrorAt(stream_keys_[p], sequence, env.status());
      return true;
    }
    if (env->idempotency_key && *env->idempotency_key == key) {
      *found = AppendResolution::Committed(p, sequence);
      return true;
    }
    return false;  // another key with the same hash
  });
  return error;
}

// ---- Accessors ----

std::optional<uint64_t> DurableChannel::NextExpectedSequence(size_t partition_index) const {
  if (partition_index >= next_.size()) return std::nullopt;
  return next_[partition_index];
}

size_t DurableChannel::PartitionFor(const MessageEnvelope& envelope) const {
  return PartitionOf(partition_key_, stream_keys_.size(), envelope);
}

std::string DurableChannel::StreamKeyFor(size_t partition_index) const {
  return channel_id_ + ":" + std::to_string(partition_index);
}

KeyLookup DurableChannel::GetKeyLookup() const {
  return KeyLookup(*registry_, scope_, stream_keys_);
}

Status DurableChannel::Fail(ChannelError error) {
  Status s = error.status;
  last_error_ = std::move(error);
  return s;
}

// ---- Publish ----

AppendRequest DurableChannel::RowRequest(size_t p, const std::string& bytes,
                                         const std::optional<std::string>& record_key) const {
  AppendRequest request;
  request.stream = stream_ids_[p];
  request.records.push_back(AppendRecord{record_key, bytes});
  request.now_ms = registry_->clock().NowMs();
  return request;
}

Result<AppendResult> DurableChannel::AppendAt(uint64_t sequence, AppendRequest&& request) {
  request.expected_offset = sequence + 1;
  std::promise<Result<AppendResult>> promise;
  auto future = promise.get_future();
  registry_->store().Append(
      std::move(request), [&promise](Result<AppendResult> r) { promise.set_value(std::move(r)); });
  return future.get();
}

Result<uint64_t> DurableChannel::Publish(const MessageEnvelope& envelope) {
  RUNNEL_ASSIGN_OR_RETURN(PublishReceipt receipt, PublishWithReceipt(envelope));
  return receipt.offset;
}

Result<PublishReceipt> DurableChannel::PublishWithReceipt(const MessageEnvelope& envelope) {
  last_error_.reset();
  // U6: settle an earlier uncertain append first, with one read of its slot.
  if (pending_) {
    auto settled = ResolveImpl();
    if (!settled.ok()) return settled.status();
  }
  const std::optional<std::string>& key = envelope.idempotency_key;
  // Start loading the key's index slot now; validation and encoding hide the memory latency.
  const uint64_t key_hash = key ? channel::KeyIndex::Hash(*key) : 0;
  if (key) index_->Prefetch(key_hash);
  if (Status valid = ValidateEnvelope(envelope); !valid.ok()) {
    return Fail({ChannelError::Kind::kEnvelopeError,
                 Status::InvalidArgument("EnvelopeError: " + std::string(valid.message()))});
  }
  const size_t p = PartitionFor(envelope);
  const std::string bytes = EncodeEnvelope(envelope);
  auto duplicate = [](const AppendResolution& r) {
    return PublishReceipt{r.partition, r.sequence, r.offset, true};
  };
  auto fail_read = [&](const Status& s) {
    return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                     : ChannelError::Kind::kStoreError,
                 s, stream_keys_[p]});
  };
  // The evidence and the request of the first attempt (their sequence is set below). Built
  // before the key lookup: their copies overlap the load of the key's index slot.
  auto make_evidence = [&] {
    UnresolvedAppend evidence;
    evidence.channel = channel_id_;
    evidence.stream_key = stream_keys_[p];
    evidence.partition = p;
    evidence.payload = bytes;
    evidence.idempotency_key = key;
    return evidence;
  };
  UnresolvedAppend evidence = make_evidence();
  AppendRequest request = RowRequest(p, bytes, envelope.key);
  if (key) {
    // The index must cover every slot below the one this append reserves (see header).
    if (scanned_[p] < next_[p]) {
      if (Status s = CatchUp(p); !s.ok()) return fail_read(s);
    }
    if (check_all_partitions_) {
      for (size_t q = 0; q < stream_keys_.size(); ++q) {
        if (q == p) continue;
        if (Status s = CatchUp(q); !s.ok()) {
          return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                           : ChannelError::Kind::kStoreError,
                       s, stream_keys_[q]});
        }
      }
    }
    std::optional<AppendResolution> hit;
    if (Status s = IndexLookup(*key, key_hash, &hit); !s.ok()) return fail_read(s);
    if (hit) return duplicate(*hit);  // I4
    // The row this append writes must be indexable once it commits.
    if (index_->full()) {
      return Fail({ChannelError::Kind::kOverflow, IndexFull(), stream_keys_[p]});
    }
  }
  for (int attempt = 0;; ++attempt) {
    const uint64_t sequence = next_[p];
    if (sequence > kMaxSequence) {
      ChannelError e{ChannelError::Kind::kOverflow,
                     Status::OutOfRange("Overflow: " + Where(stream_keys_[p], sequence) +
                                        ": the partition has no slot left below 2^64-1"),
                     stream_keys_[p], sequence};
      return Fail(std::move(e));
    }
    // The evidence exists before the append is sent (seed: retained before the cancellable
    // append), so no outcome can leave the channel without it.
    if (attempt > 0) {
      evidence = make_evidence();
      request = RowRequest(p, bytes, envelope.key);
    }
    evidence.sequence = sequence;
    pending_ = std::move(evidence);

    auto appended = AppendAt(sequence, std::move(request));
    if (appended.ok()) {
      pending_.reset();
      if (appended->first_offset != sequence + 1) {
        return Fail({ChannelError::Kind::kStoreError,
                     Status::Internal("StoreError: " + Where(stream_keys_[p], sequence) +
                                      ": the store placed the guarded append at offset " +
                                      std::to_string(appended->first_offset)),
                     stream_keys_[p], sequence});
      }
      next_[p] = sequence + 1;
      if (scanned_[p] == sequence) {
        // Cannot fail: the index had room before the append and nothing else ran since.
        if (!key || index_->Insert(key_hash, p, sequence)) {
          scanned_[p] = sequence + 1;
          last_fp_[p] = channel::RowFingerprint(bytes);
        }
      }
      PublishReceipt receipt{p, sequence, sequence + 1, false};
      if (Status s = AfterCommit(); !s.ok()) {
        return Fail({ChannelError::Kind::kStoreError,
                     s.Annotate("StoreError: flush after the publish committed at " +
                                Where(stream_keys_[p], sequence)),
                     stream_keys_[p], sequence});
      }
      return receipt;
    }
    Status status = std::move(appended).status();
    if (status.code() == StatusCode::kOutcomeUnknown) {
      // U1: keep the evidence, never resend. S4: this is not a conflict.
      pending_->append_error = status;
      if (!status.message().empty()) pending_->cause = std::string(status.message());
      ChannelError e{
          ChannelError::Kind::kAppendUnresolved,
          Status::OutcomeUnknown("AppendUnresolved: " + Where(stream_keys_[p], sequence) + ": " +
                                 pending_->cause),
          stream_keys_[p], sequence};
      e.append_error = status;
      return Fail(std::move(e));
    }
    pending_.reset();  // a definite refusal: nothing was written
    if (status.code() == StatusCode::kConflict) {
      // S2: learn the rows we have not seen, adopt the tail, retry once.
      if (Status s = CatchUp(p); !s.ok()) return fail_read(s);
      const uint64_t actual = status.conflict_actual().value_or(1);
      next_[p] = std::max(scanned_[p], actual == 0 ? 0 : actual - 1);
      if (key) {
        std::optional<AppendResolution> hit;
        if (Status s = IndexLookup(*key, key_hash, &hit); !s.ok()) return fail_read(s);
        if (hit) return duplicate(*hit);
        if (index_->full()) {
          return Fail({ChannelError::Kind::kOverflow, IndexFull(), stream_keys_[p]});
        }
      }
      if (attempt == 0) continue;
      ChannelError e{
          ChannelError::Kind::kSequenceConflict,
          Status::Conflict(
              "SequenceConflict: " + Where(stream_keys_[p], sequence) + ": expected offset " +
                  std::to_string(status.conflict_expected().value_or(0)) + ", actual " +
                  std::to_string(actual) + " (second conflict; not retried)",
              status.conflict_expected().value_or(sequence + 1), actual),
          stream_keys_[p], sequence};
      e.expected = e.status.conflict_expected();
      e.actual = e.status.conflict_actual();
      return Fail(std::move(e));
    }
    if (status.code() == StatusCode::kOutOfRange) {
      return Fail({ChannelError::Kind::kOverflow,
                   Status::OutOfRange("Overflow: " + Where(stream_keys_[p], sequence) + ": " +
                                      std::string(status.message())),
                   stream_keys_[p], sequence});
    }
    return Fail({ChannelError::Kind::kStoreError,
                 status.Annotate("StoreError: " + Where(stream_keys_[p], sequence)),
                 stream_keys_[p], sequence});
  }
}

Status DurableChannel::AfterCommit() {
  ++since_flush_;
  if (++since_checkpoint_ >= channel::kCheckpointInterval) {
    // V3: a failed record costs only a longer restart; the publish stands.
    if (Status s = RecordCheckpoint(); !s.ok()) {
      Warn("head checkpoint not recorded: " + s.ToString());
      since_checkpoint_ = 0;
    }
  }
  const bool due =
      policy_.kind == CheckpointPolicy::Kind::kPerMessage ||
      (policy_.kind == CheckpointPolicy::Kind::kPerBatch && since_flush_ >= policy_.batch);
  if (!due) return Status::OK();
  return FlushOnly();
}

Status DurableChannel::FlushStore() {
  RUNNEL_RETURN_IF_ERROR(RecordCheckpoint());
  return FlushOnly();
}

Status DurableChannel::FlushOnly() {
  Status s = registry_->store().Flush();
  if (!s.ok()) return s;
  since_flush_ = 0;
  ++flush_count_;
  return Status::OK();
}

// ---- Head checkpoint (V3) ----

namespace {

Result<AppendResult> AppendAndWait(Store& store, AppendRequest request) {
  std::promise<Result<AppendResult>> promise;
  auto future = promise.get_future();
  store.Append(std::move(request),
               [&promise](Result<AppendResult> r) { promise.set_value(std::move(r)); });
  return future.get();
}

}  // namespace

Result<bool> DurableChannel::LoadCheckpoint() {
  Store& store = registry_->store();
  const size_t n = stream_keys_.size();
  auto info = store.GetStream(scope_.Label(), checkpoint_key_);
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kNotFound) return false;  // missing: full walk
    return info.status().Annotate("StoreError: opening " + checkpoint_key_);
  }
  auto tag = attributes::Get(info->spec.attributes, kAttributeKey);
  if (!tag.ok() || !tag->has_value() || **tag != CheckpointTag(n)) {
    return ConfigError("stream " + checkpoint_key_ +
                       " exists and is not the head checkpoint of a channel with " +
                       std::to_string(n) + " partitions");
  }
  checkpoint_id_ = info->id;
  checkpoint_next_ = info->next_offset;
  // The chain is the last base record and every record after it; a refused record before
  // that base does not matter.
  std::vector<channel::CheckpointRecord> chain;
  std::string problem;
  bool any = false;
  uint64_t from = 1;
  for (;;) {
    auto rows = store.Read(*checkpoint_id_, from, kReadBatchSize, StreamRegistry::kMaxReadBytes);
    if (!rows.ok()) return rows.status().Annotate("StoreError: reading " + checkpoint_key_);
    if (rows->empty()) break;
    for (StoredRecord& r : *rows) {
      any = true;
      from = r.offset + 1;
      checkpoint_next_ = std::max(checkpoint_next_, r.offset + 1);
      const std::string at = "the record at offset " + std::to_string(r.offset);
      auto record = channel::DecodeCheckpoint(r.payload);
      if (!record.ok()) {
        problem = at + " is corrupt: " + std::string(record.status().message());
        continue;
      }
      if (record->head.size() != n) {
        problem = at + " covers " + std::to_string(record->head.size()) + " partitions, not " +
                  std::to_string(n);
        continue;
      }
      if (record->IsBase()) {
        chain.clear();
        problem.clear();
        chain.push_back(std::move(*record));
        continue;
      }
      if (!problem.empty()) continue;
      if (chain.empty()) {
        problem = at + " continues no base record";
      } else if (record->from != chain.back().head) {
        problem = at + " does not start where the record before it ended";
      } else {
        chain.push_back(std::move(*record));
      }
    }
  }
  if (!any) return false;  // missing
  if (problem.empty() && chain.empty()) problem = "no base record";
  if (problem.empty()) {
    // Verify the claim of the last record against the partitions (read after the chain, so
    // rows a record covers are committed before the partition's extent is read).
    const channel::CheckpointRecord& last = chain.back();
    for (size_t p = 0; p < n && problem.empty(); ++p) {
      auto part = store.GetStreamById(stream_ids_[p]);
      if (!part.ok()) return part.status().Annotate("StoreError: reading " + stream_keys_[p]);
      const uint64_t end = part->next_offset - 1;
      const std::string claim =
          "partition " + stream_keys_[p] + " head " + std::to_string(last.head[p]);
      if (last.head[p] > end) {
        problem =
            "it overclaims: " + claim + ", but the partition ends at slot " + std::to_string(end);
        break;
      }
      if (last.head[p] == 0 || last.fingerprint[p] == 0) continue;
      auto row = store.ReadAt(stream_ids_[p], last.head[p]);
      if (!row.ok()) {
        return row.status().Annotate("StoreError: verifying the head checkpoint at " +
                                     Where(stream_keys_[p], last.head[p] - 1));
      }
      // An absent row was removed by retention: nothing left to compare with.
      if (row->has_value() && channel::RowFingerprint((*row)->payload) != last.fingerprint[p]) {
        problem = "it disagrees with the rows: " + claim + ", but the row at slot " +
                  std::to_string(last.head[p] - 1) + " is not the one it recorded";
      }
    }
  }
  if (!problem.empty()) {
    Warn("head checkpoint in " + checkpoint_key_ + " refused (" + problem +
         "); walking every partition");
    return false;
  }
  for (const channel::CheckpointRecord& record : chain) {
    for (const channel::CheckpointEntry& e : record.entries) {
      if (!index_->Insert(e.hash, e.partition, e.slot)) return IndexFull();
    }
  }
  recorded_ = index_->size();
  const channel::CheckpointRecord& last = chain.back();
  scanned_ = last.head;
  ck_head_ = last.head;
  ck_fp_ = last.fingerprint;
  last_fp_ = last.fingerprint;
  need_base_ = false;
  return true;
}

Status DurableChannel::FollowCheckpoints() {
  Store& store = registry_->store();
  if (!checkpoint_id_) {
    auto info = store.GetStream(scope_.Label(), checkpoint_key_);
    if (!info.ok()) return info.status().Annotate("StoreError: opening " + checkpoint_key_);
    checkpoint_id_ = info->id;
  }
  const size_t n = stream_keys_.size();
  for (;;) {
    auto rows = store.Read(*checkpoint_id_, checkpoint_next_, kReadBatchSize,
                           StreamRegistry::kMaxReadBytes);
    if (!rows.ok()) return rows.status().Annotate("StoreError: reading " + checkpoint_key_);
    if (rows->empty()) return Status::OK();
    for (const StoredRecord& r : *rows) {
      checkpoint_next_ = r.offset + 1;
      auto record = channel::DecodeCheckpoint(r.payload);
      if (!record.ok() || record->head.size() != n) {
        need_base_ = true;  // the chain is broken: the next record restarts it
        continue;
      }
      // A record that does not continue the chain as known, or that lowers a head (a base
      // written by an instance that knows less), leaves rows this instance no longer holds
      // as unrecorded: restart the chain.
      if (!record->IsBase() && record->from != ck_head_) need_base_ = true;
      for (size_t p = 0; p < n; ++p) {
        if (record->head[p] < ck_head_[p]) need_base_ = true;
      }
      ck_head_ = record->head;
      ck_fp_ = record->fingerprint;
    }
  }
}

Status DurableChannel::RecordCheckpoint() {
  for (int attempt = 0;; ++attempt) {
    Status s = AppendCheckpoint();
    if (s.ok() || s.code() != StatusCode::kConflict || attempt == 1) return s;
    RUNNEL_RETURN_IF_ERROR(FollowCheckpoints());
  }
}

Status DurableChannel::AppendCheckpoint() {
  const size_t n = stream_keys_.size();
  const bool base = need_base_;
  std::vector<uint64_t> from = base ? std::vector<uint64_t>(n, 0) : ck_head_;
  std::vector<uint64_t> head(n);
  std::vector<uint64_t> fp(n);
  bool changed = base;
  for (size_t p = 0; p < n; ++p) {
    // A base holds exactly this instance's index; a delta never lowers a head.
    head[p] = base ? scanned_[p] : std::max(ck_head_[p], scanned_[p]);
    fp[p] = head[p] == scanned_[p] ? last_fp_[p] : ck_fp_[p];
    changed = changed || head[p] != ck_head_[p];
  }
  if (!changed) {
    since_checkpoint_ = 0;
    return Status::OK();
  }
  // The entries in (partition, slot) order, in a buffer kept from one record to the next: a
  // fresh one each time would often come from untouched heap pages.
  std::vector<channel::CheckpointEntry>& entries = checkpoint_entries_;
  entries.clear();
  if (base) {
    entries.reserve(index_->size());
    for (size_t k = 0; k < index_->size(); ++k) {
      const channel::KeyIndex::Entry& e = index_->at(k);
      entries.push_back({e.partition, e.slot, e.hash});
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
      return a.partition != b.partition ? a.partition < b.partition : a.slot < b.slot;
    });
  } else {
    // The index entries from recorded_ on are in slot order within each partition (rows are
    // indexed in slot order), so a stable bucketing by partition sorts them.
    std::vector<size_t> start(n + 1, 0);
    size_t kept = 0;
    const size_t end = index_->size();
    for (size_t k = recorded_; k < end; ++k) {
      const channel::KeyIndex::Entry& e = index_->at(k);
      if (e.slot >= from[e.partition] && e.slot < head[e.partition]) {
        ++start[e.partition + 1];
        ++kept;
      }
    }
    for (size_t p = 0; p < n; ++p) start[p + 1] += start[p];
    entries.resize(kept);
    for (size_t k = recorded_; k < end; ++k) {
      const channel::KeyIndex::Entry& e = index_->at(k);
      if (e.slot >= from[e.partition] && e.slot < head[e.partition]) {
        entries[start[e.partition]++] = {e.partition, e.slot, e.hash};
      }
    }
  }
  // Split into records of at most kMaxCheckpointEntries, each continuing the previous one;
  // only the last carries the fingerprints. They are appended in one atomic batch.
  AppendRequest request;
  request.now_ms = registry_->clock().NowMs();
  request.expected_offset = checkpoint_next_;
  const size_t total = entries.size();
  const std::vector<uint64_t> no_claim(n, 0);
  size_t i = 0;
  do {
    const size_t take = std::min<size_t>(total - i, channel::kMaxCheckpointEntries);
    const std::span<const channel::CheckpointEntry> slice(entries.data() + i, take);
    i += take;
    if (i == total) {
      request.records.push_back(
          AppendRecord{std::nullopt, channel::EncodeCheckpoint(from, head, fp, slice)});
      break;
    }
    const channel::CheckpointEntry& next = entries[i];
    std::vector<uint64_t> upto = from;
    for (size_t p = 0; p < next.partition; ++p) upto[p] = head[p];
    upto[next.partition] = next.slot;
    request.records.push_back(
        AppendRecord{std::nullopt, channel::EncodeCheckpoint(from, upto, no_claim, slice)});
    from = std::move(upto);
  } while (i < total);
  // Keep the buffer for the next delta, but not the size of a whole base.
  if (entries.capacity() > 4 * channel::kCheckpointInterval) {
    std::vector<channel::CheckpointEntry>().swap(entries);
  }

  Store& store = registry_->store();
  if (!checkpoint_id_) {
    CreateStreamOptions create;
    RUNNEL_ASSIGN_OR_RETURN(create.attributes,
                            attributes::Set("", kAttributeKey, CheckpointTag(n)));
    Status created = registry_->CreateStream(scope_, checkpoint_key_, create);
    if (!created.ok() && created.code() != StatusCode::kAlreadyExists) {
      return created.Annotate("StoreError: creating " + checkpoint_key_);
    }
    auto info = store.GetStream(scope_.Label(), checkpoint_key_);
    if (!info.ok()) return info.status().Annotate("StoreError: opening " + checkpoint_key_);
    auto tag = attributes::Get(info->spec.attributes, kAttributeKey);
    if (!tag.ok() || !tag->has_value() || **tag != CheckpointTag(n)) {
      return ConfigError("stream " + checkpoint_key_ + " is not a channel head checkpoint");
    }
    checkpoint_id_ = info->id;
    request.expected_offset = checkpoint_next_ = std::max(checkpoint_next_, info->next_offset);
  }
  request.stream = *checkpoint_id_;
  auto appended = AppendAndWait(store, std::move(request));
  if (!appended.ok()) {
    return appended.status().Annotate("StoreError: recording the head checkpoint in " +
                                      checkpoint_key_);
  }
  ck_head_ = std::move(head);
  ck_fp_ = std::move(fp);
  checkpoint_next_ = appended->next_offset;
  recorded_ = index_->size();
  need_base_ = false;
  since_checkpoint_ = 0;
  ++checkpoint_count_;
  if (base && appended->first_offset > 1) {
    // The records before the new base are no longer part of the chain.
    auto cut = store.TruncatePrefix(*checkpoint_id_, appended->first_offset - 1, false);
    if (!cut.ok()) Warn("old head checkpoint records not removed: " + cut.status().ToString());
  }
  return Status::OK();
}

// ---- Pending appends ----

Result<std::optional<AppendResolution>> DurableChannel::ResolvePending() {
  last_error_.reset();
  return ResolveImpl();
}

Result<std::optional<AppendResolution>> DurableChannel::ResolveImpl() {
  if (!pending_) return std::optional<AppendResolution>();  // U3
  const size_t p = pending_->partition;
  const uint64_t sequence = pending_->sequence;
  auto unreadable = [&](const Status& read_error) {
    ChannelError e{
        ChannelError::Kind::kPendingAppendUnreadable,
        Status::FailedPrecondition("PendingAppendUnreadable: " + Where(stream_keys_[p], sequence) +
                                   ": append error: " + pending_->append_error.ToString() +
                                   "; read error: " + read_error.ToString()),
        stream_keys_[p], sequence};
    e.append_error = pending_->append_error;
    e.read_error = read_error;
    return Fail(std::move(e));
  };
  Store& store = registry_->store();
  auto slot = store.ReadAt(stream_ids_[p], sequence + 1);
  if (!slot.ok()) return unreadable(slot.status());  // U5: the evidence stays
  if (!slot->has_value()) {
    // Empty means "never written" only if the slot is at or past the stream's end; a slot
    // below it was written and removed by retention, and cannot be told apart.
    auto info = store.GetStreamById(stream_ids_[p]);
    if (!info.ok()) return unreadable(info.status());
    if (info->next_offset > sequence + 1) {
      return unreadable(Status::NotFound("the slot was written and then removed by retention"));
    }
    pending_.reset();
    return std::optional<AppendResolution>(AppendResolution::Absent());
  }
  const StoredRecord& row = **slot;
  const bool own = row.payload == pending_->payload;
  next_[p] = std::max(next_[p], sequence + 1);
  if (scanned_[p] == sequence) {
    auto env = DecodeEnvelope(row.payload);
    // An undecodable foreign row is left for CatchUp to report by name (V7).
    // A full index leaves the row for CatchUp to report too.
    if (env.ok() && IndexRow(p, sequence, *env).ok()) {
      scanned_[p] = sequence + 1;
      last_fp_[p] = channel::RowFingerprint(row.payload);
    }
  }
  pending_.reset();
  if (own) {
    return std::optional<AppendResolution>(AppendResolution::Committed(p, sequence));
  }
  return std::optional<AppendResolution>(AppendResolution::Absent());
}

void DurableChannel::AbandonPending() {
  pending_.reset();
}

// ---- Idempotency keys ----

Result<AppendResolution> DurableChannel::FindIdempotencyKey(std::string_view key,
                                                            const std::vector<uint64_t>& from) {
  last_error_.reset();
  if (pending_ && pending_->idempotency_key && *pending_->idempotency_key == key) {
    ChannelError e{ChannelError::Kind::kAppendUnresolved,
                   Status::FailedPrecondition("AppendUnresolved: key '" + std::string(key) +
                                              "' is held by the unresolved append at " +
                                              Where(pending_->stream_key, pending_->sequence) +
                                              "; resolve it first"),
                   pending_->stream_key, pending_->sequence};
    return Fail(std::move(e));
  }
  for (size_t p = 0; p < stream_keys_.size(); ++p) {
    if (Status s = CatchUp(p); !s.ok()) {
      return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                       : ChannelError::Kind::kStoreError,
                   s, stream_keys_[p]});
    }
  }
  std::optional<AppendResolution> hit;
  if (Status s = IndexLookup(key, channel::KeyIndex::Hash(key), &hit); !s.ok()) {
    return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                     : ChannelError::Kind::kStoreError,
                 s});
  }
  if (!hit) return AppendResolution::Absent();
  const AppendResolution& r = *hit;
  if (r.partition < from.size() && r.sequence < from[r.partition]) {
    return AppendResolution::Absent();
  }
  return r;
}

Result<AppendResolution> DurableChannel::ResolveIdempotencyKey(std::string_view key) {
  if (pending_ && pending_->idempotency_key && *pending_->idempotency_key == key) {
    RUNNEL_ASSIGN_OR_RETURN(std::optional<AppendResolution> settled, ResolvePending());
    if (settled) return *settled;
  }
  return FindIdempotencyKey(key);
}

Result<size_t> DurableChannel::StoredPartitionCount(const StreamRegistry& registry,
                                                    const StreamScope& scope,
                                                    std::string_view channel_id) {
  const std::string name = std::string(channel_id) + ":0";
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, registry.store().GetStream(scope.Label(), name));
  auto tag = attributes::Get(info.spec.attributes, kAttributeKey);
  if (!tag.ok() || !tag->has_value()) {
    return ConfigError("stream " + name + " is not a partition of a runnel channel");
  }
  const size_t count = TagPartitionCount(**tag);
  if (count == 0) return ConfigError("stream " + name + " has a malformed partition count");
  return count;
}

// ---- EphemeralChannel ----

Result<EphemeralChannel> EphemeralChannel::Create(std::string channel_id, size_t partition_count,
                                                  PartitionKeyFn partition_key) {
  if (partition_count == 0) return ConfigError("partition_count must be at least 1");
  EphemeralChannel ch;
  ch.channel_id_ = std::move(channel_id);
  ch.partition_key_ = std::move(partition_key);
  ch.partitions_.resize(partition_count);
  return ch;
}

Result<EphemeralChannel> EphemeralChannel::FromConfig(std::string channel_id,
                                                      const DurabilityConfig& config,
                                                      PartitionKeyFn partition_key) {
  RUNNEL_RETURN_IF_ERROR(config.Validate());
  if (config.mode != DurabilityMode::kEphemeral) {
    return ConfigError("an EphemeralChannel needs an ephemeral config");
  }
  return Create(std::move(channel_id), config.partition_count, std::move(partition_key));
}

size_t EphemeralChannel::PartitionFor(const MessageEnvelope& envelope) const {
  return PartitionOf(partition_key_, partitions_.size(), envelope);
}

std::optional<uint64_t> EphemeralChannel::NextExpectedSequence(size_t partition_index) const {
  if (partition_index >= partitions_.size()) return std::nullopt;
  return partitions_[partition_index].size();
}

Result<uint64_t> EphemeralChannel::Publish(const MessageEnvelope& envelope) {
  const size_t p = PartitionFor(envelope);
  const uint64_t sequence = partitions_[p].size();
  if (sequence > DurableChannel::kMaxSequence) {
    return Status::OutOfRange("Overflow: partition " + std::to_string(p) + " is full");
  }
  partitions_[p].push_back(envelope);
  return sequence + 1;
}

const std::vector<MessageEnvelope>& EphemeralChannel::Partition(size_t partition_index) const {
  static const std::vector<MessageEnvelope> kEmpty;
  return partition_index < partitions_.size() ? partitions_[partition_index] : kEmpty;
}

}  // namespace runnel
