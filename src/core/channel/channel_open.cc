// DurableChannel: construction, opening the partitions, catching up and the index rows.
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
#include "core/channel/channel_internal.h"
#include "core/channel/checkpoint_format.h"
#include "core/channel/envelope_format.h"
#include "core/channel/key_index.h"

namespace runnel {

using channel_internal::CheckpointTag;
using channel_internal::ConfigError;
using channel_internal::EnvelopeErrorAt;
using channel_internal::kAttributeKey;
using channel_internal::Where;

namespace {

// The tag's JSON text; keys in sorted order, as a JSON library would print them back.
std::string PartitionTag(size_t partition_count, size_t partition) {
  return "{\"partition\":" + std::to_string(partition) +
         ",\"partitions\":" + std::to_string(partition_count) + "}";
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
// an envelope can sit under a partition's tag. (A protocol append is decided inside the store's
// atomic step from the attributes it finds there, so one tagged first is refused.)
Result<TaggedStream> OpenTagged(StreamRegistry& registry, const StreamScope& scope,
                                const std::string& key, const std::string& tag,
                                std::string_view role, const std::string& what) {
  return RetryOnConflict([&] { return OpenTaggedOnce(registry, scope, key, tag, role, what); });
}

}  // namespace

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

}  // namespace runnel
