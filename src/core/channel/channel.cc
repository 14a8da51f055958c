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
using channel_internal::Where;

namespace {

size_t PartitionOf(const PartitionKeyFn& fn, size_t count, const MessageEnvelope& e) {
  if (count <= 1 || !fn) return 0;
  return static_cast<size_t>(fn(e) % count);
}

}  // namespace

namespace channel_internal {

// The tag of the companion stream holding the head checkpoint (V3).
std::string CheckpointTag(size_t partition_count) {
  return "{\"checkpoint\":true,\"partitions\":" + std::to_string(partition_count) + "}";
}

Status ConfigError(std::string_view what) {
  return Status::InvalidArgument("ConfigError: " + std::string(what));
}

std::string Where(std::string_view stream_key, uint64_t sequence) {
  return "stream " + std::string(stream_key) + " sequence " + std::to_string(sequence) +
         " (offset " + std::to_string(sequence + 1) + ")";
}

Status EnvelopeErrorAt(std::string_view stream_key, uint64_t sequence, const Status& decode) {
  std::string msg(decode.message());
  constexpr std::string_view kPrefix = "EnvelopeError: ";
  if (msg.rfind(kPrefix, 0) == 0) msg.erase(0, kPrefix.size());
  return Status::Corruption("EnvelopeError: " + Where(stream_key, sequence) + ": " + msg);
}

}  // namespace channel_internal

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
