// Partitioned durable channels (seed 003, SEMANTICS K, I, U, S, V, F).
//
// A DurableChannel spreads published envelopes over N partitions. Partition i is an ordinary
// registry stream named `<channel_id>:<i>` in the channel's scope, so it can be read with
// ReadSince, consumer groups and HTTP like any stream. Each published envelope is one record;
// its payload is the envelope's canonical encoding (EncodeEnvelope; layout in
// docs/formats/envelope.md) and its record key is the envelope's `key`.
//
// Positions. The seed counts partition slots from 0 ("sequences"); runnel's public offsets
// count from 1. Slot s of a partition is stream offset s + 1 (SEMANTICS choice 1).
// NextSequences()/NextExpectedSequence() are slot counters: the slot the next publish to that
// partition will reserve. Everything returned to callers as a position (PublishReceipt::offset,
// AppendResolution::offset, conflict expected/actual) is a public offset; the slot is given
// next to it where useful.
//
// Appends. Publish appends with `expected_offset = next[p] + 1`, so the store refuses the write
// if the slot is taken (U8): no publish can overwrite or duplicate a row.
//   - committed: next[p] advances, the key is indexed.
//   - kOutcomeUnknown (no definite outcome): the exact evidence (partition, slot, bytes,
//     idempotency key, cause) is kept as the pending append and Publish returns
//     kOutcomeUnknown "AppendUnresolved: ..." (U1). The payload is never resent. next[p] does
//     not move (U2). ResolvePending reads exactly that slot (U4); the next Publish does the
//     same first, and is refused with kFailedPrecondition "PendingAppendUnreadable: ..." if the
//     read fails (U6).
//   - kConflict (definite): the channel reads the rows it has not seen yet (indexing their
//     keys), adopts the partition's tail and retries once (S2). A second conflict is returned
//     as kConflict "SequenceConflict: ..." with conflict_expected()/conflict_actual() (public
//     offsets). An unknown outcome never takes this path (S4).
//   - any other error is a definite refusal and is returned with nothing pending.
//
// Idempotency keys (I1-I5). An envelope may carry an idempotency key. The channel holds an
// in-memory index hash(key) -> (partition, slot) that answers "was this key committed?" without
// a scan per publish; a hash hit is confirmed by reading that one row and comparing the key, so
// the answer is exact (only duplicates pay that read). Invariant: for every partition p the
// index holds every keyed row in slots [0, scanned[p]) and nothing else. It is built by
// reading every partition at open (1024 records a page) and kept current by indexing every row
// this channel commits, and every row it reads past: the gap read after a conflict and a
// foreign row found by ResolvePending. Because each append is position-guarded at next[p], and
// next[p] == scanned[p] whenever a keyed publish is sent (the channel reads the gap first when
// it is not), a row written by anyone else into partition p before our append makes the
// append conflict; the gap read then indexes that row and the key is checked again before the
// retry. Hence:
//   - a key already committed in the partition the envelope routes to is never committed
//     again, by this instance or by any other instance sharing the store (the same envelope
//     always routes to the same partition);
//   - a key committed in any partition before this channel was opened, or by this channel,
//     is found whatever partition the new envelope routes to;
//   - FindIdempotencyKey first catches the index up on every partition, so it agrees with a
//     full scan (KeyLookup::Find) of the partitions as they were when it started reading.
// A key committed by another instance, after this one opened, in a partition other than the
// one the new envelope routes to is found only with ChannelOptions::check_all_partitions_for_keys
// (which catches up every partition before a keyed publish: one catalog read per partition,
// plus a read of any new rows). Never covered: two instances publishing the same key
// *concurrently* with envelopes that route to *different* partitions; no partition guard
// orders those two writes.
// A failed read or an undecodable row is an error, never "absent" (I2).
// Limit: one channel instance indexes at most 2^32-1 keyed rows. Past that, a keyed publish is
// refused before anything is appended, and opening or catching up over more keyed rows fails:
// kResourceExhausted "KeyIndexFull: ..." (LastError kind kOverflow).
//
// Recovery (V1-V7). Opening a channel creates missing partition streams (tagging them with the
// channel's partition count under the "runnel.channel" key of their attributes,
// {"partition":<i>,"partitions":<n>}) and refuses partitions tagged with another count. Next
// sequences come from the stream's next offset (which survives retention, V4) and the highest
// stored row, so a new channel over the same store continues where the old one stopped. A row
// that does not decode is kCorruption "EnvelopeError: stream <key> sequence <s>: ..." (V7).
//
// Head checkpoint (V3). The key index of slots [0, head[p]) is persisted, in slices, as a chain
// of records in the companion stream `<channel_id>:checkpoint` (tagged
// {"checkpoint":true,"partitions":<n>}; format: src/core/channel/checkpoint_format.h and
// docs/formats/channel_checkpoint.md). A record is appended, position-guarded, after every 256
// appends this instance commits, by FlushStore, and by the destructor (a clean stop), each time
// holding only the keyed rows not yet recorded. Open reads the chain (from its last base
// record), verifies it — checksums, continuity, and for the last record that no head passes the
// partition's end and that the row just below each head has the fingerprint the record claims
// (one ReadAt per non-empty partition) — loads its entries into the index and reads only the
// rows after the heads. A missing chain means a full walk, then a base record (when the walk
// found rows). A chain that does not verify is refused with a warning (ChannelOptions::warn),
// then a full walk and a new base record, after which the older records are truncated away.
// A failed checkpoint write never fails a publish: it is reported through warn and retried at
// the next interval; FlushStore returns it. A restart therefore reads the chain (about 20
// bytes per keyed row, no payloads) plus the rows after the last record.
//
// Thread-safety: a DurableChannel is NOT thread-safe (the seed's channel is `&mut self`): use
// one instance per writer, or guard it externally. Several instances, in one process or many,
// may share one store and the same partitions; the store's position guard keeps them apart
// (S3). An EphemeralChannel is likewise single-threaded.
#ifndef RUNNEL_CHANNEL_H_
#define RUNNEL_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/registry.h"
#include "runnel/status.h"
#include "runnel/types.h"

namespace runnel {

namespace channel {
class KeyIndex;
struct CheckpointEntry;
}  // namespace channel

// ---------------------------------------------------------------------------------------------
// Envelope

struct CausalContext {
  std::optional<std::string> parent_id;  // UTF-8
  std::optional<uint64_t> vector_clock_entry;

  friend bool operator==(const CausalContext&, const CausalContext&) = default;
};

// One published message. Strings are UTF-8; the payload is opaque bytes.
struct MessageEnvelope {
  std::string payload;
  std::optional<CausalContext> causal_context;
  // Milliseconds since the epoch, from the publisher. Kept in the envelope only: the record's
  // appended_at_ms (which age retention uses) comes from the registry's clock.
  uint64_t timestamp_ms = 0;
  std::string publisher_id;
  // The producer's key for duplicate suppression (I1-I5).
  std::optional<std::string> idempotency_key;
  // runnel extension: the message key a partition-key function may route by (see
  // HashKeyPartitioner). Stored as the record key, so stream readers see it.
  std::optional<std::string> key;

  friend bool operator==(const MessageEnvelope&, const MessageEnvelope&) = default;
};

// The canonical, versioned binary form (docs/formats/envelope.md). Equal envelopes always give
// identical bytes, and Decode(Encode(e)) == e.
std::string EncodeEnvelope(const MessageEnvelope& envelope);
// kCorruption "EnvelopeError: ..." on bad magic, unknown version, truncation, a presence byte
// other than 0/1, invalid UTF-8 in a string field, or trailing bytes.
Result<MessageEnvelope> DecodeEnvelope(std::string_view bytes);

// ---------------------------------------------------------------------------------------------
// Configuration

// Maps an envelope to a partition key; the channel takes it modulo the partition count.
// Must be deterministic and must not do I/O.
using PartitionKeyFn = std::function<uint64_t(const MessageEnvelope&)>;

// FNV-1a 64 of envelope.key (0 when there is no key): a ready partition-key function for
// keyed publishing (HTTP, CLI).
uint64_t HashKeyPartitioner(const MessageEnvelope& envelope);

enum class DurabilityMode { kEphemeral, kDurable, kDurableDedup, kDurableConversation };

// When the channel asks the store to flush (F4).
struct CheckpointPolicy {
  enum class Kind { kPerMessage, kPerBatch, kExplicitFlush };
  Kind kind = Kind::kExplicitFlush;
  // For kPerBatch: flush after every `batch` committed publishes. Must be >= 1.
  uint64_t batch = 0;

  static CheckpointPolicy PerMessage() { return {Kind::kPerMessage, 1}; }
  static CheckpointPolicy PerBatch(uint64_t n) { return {Kind::kPerBatch, n}; }
  static CheckpointPolicy ExplicitFlush() { return {Kind::kExplicitFlush, 0}; }
};

struct DurabilityConfig {
  DurabilityMode mode = DurabilityMode::kDurable;
  size_t partition_count = 1;
  // For kDurableDedup: how long dedup decisions are kept. Must be > 0 in that mode.
  uint64_t dedup_ttl_ms = 0;
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::ExplicitFlush();

  // F1: kInvalidArgument "ConfigError: ..." for partition_count 0, kDurableDedup with ttl 0,
  // or PerBatch(0).
  Status Validate() const;
};

// ---------------------------------------------------------------------------------------------
// Results and evidence

// A committed publish: where it is, and whether it was committed by an earlier publish of the
// same idempotency key (then nothing was appended).
struct PublishReceipt {
  size_t partition = 0;
  uint64_t sequence = 0;  // 0-based slot
  uint64_t offset = 0;    // public offset = sequence + 1
  bool duplicate = false;

  friend bool operator==(const PublishReceipt&, const PublishReceipt&) = default;
};

// The outcome of an append that is now settled (seed AppendResolution).
struct AppendResolution {
  enum class Kind { kCommitted, kAbsent };
  Kind kind = Kind::kAbsent;
  // For kCommitted: where the row is.
  size_t partition = 0;
  uint64_t sequence = 0;
  uint64_t offset = 0;

  bool committed() const { return kind == Kind::kCommitted; }
  static AppendResolution Absent() { return {}; }
  static AppendResolution Committed(size_t partition, uint64_t sequence) {
    return {Kind::kCommitted, partition, sequence, sequence + 1};
  }
  friend bool operator==(const AppendResolution&, const AppendResolution&) = default;
};

// Exact evidence of an append sent without a definite outcome (seed UnresolvedAppend).
struct UnresolvedAppend {
  static constexpr std::string_view kDefaultCause = "append future did not return an outcome";

  std::string channel;
  std::string stream_key;  // <channel>:<partition>
  size_t partition = 0;
  uint64_t sequence = 0;  // the reserved slot; its public offset is sequence + 1
  std::string payload;    // the exact bytes sent
  std::optional<std::string> idempotency_key;
  // The store's status for the append (kOutcomeUnknown), and its text.
  Status append_error;
  std::string cause = std::string(kDefaultCause);
};

// Which seed error a failed channel call corresponds to, with its structured fields
// (DurableChannel::LastError). kConfigError is never recorded there: constructors return their
// ConfigError as a Status only, since no channel exists to hold it.
struct ChannelError {
  enum class Kind {
    kConfigError,
    kAppendUnresolved,
    kPendingAppendUnreadable,
    kSequenceConflict,
    kEnvelopeError,
    kOverflow,
    kStoreError,
  };
  Kind kind = Kind::kStoreError;
  Status status;                     // what the call returned
  std::string stream_key;            // empty if not about one partition
  std::optional<uint64_t> sequence;  // the slot concerned
  // kPendingAppendUnreadable: the original append error (kept) and the latest read error.
  Status append_error;
  Status read_error;
  // kSequenceConflict: public offsets, as in Status::conflict_expected()/conflict_actual().
  std::optional<uint64_t> expected;
  std::optional<uint64_t> actual;
};

// ---------------------------------------------------------------------------------------------
// KeyLookup: the streams that answer for a channel's idempotency keys (seed KeyLookup).
//
// A plain scan, no index: the reference the channel's index must agree with. Cheap to copy;
// shares the registry. Thread-safe (reads only).
class KeyLookup {
 public:
  KeyLookup(StreamRegistry registry, StreamScope scope, std::vector<std::string> stream_keys);

  const std::vector<std::string>& stream_keys() const { return stream_keys_; }

  // Reads partition i from slot from[i] (from the start when from is shorter), 1024 records a
  // page, decoding every envelope; the first match in partition order is Committed. Any read or
  // decode error is returned; a failed read never gives Absent (I1, I2).
  Result<AppendResolution> Find(std::string_view key, const std::vector<uint64_t>& from) const;

 private:
  StreamRegistry registry_;
  StreamScope scope_;
  std::vector<std::string> stream_keys_;
};

struct ChannelOptions {
  // Where the partition streams live.
  StreamScope scope = StreamScope::Global();
  // Empty: every envelope goes to partition 0 (K2).
  PartitionKeyFn partition_key;
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::ExplicitFlush();
  // Before each publish with an idempotency key, catch the index up on every partition, not
  // only the target one (see the file comment). Costs one catalog read per partition.
  bool check_all_partitions_for_keys = false;
  // Receives warnings (a refused head checkpoint, a failed checkpoint write), one sentence each.
  // Empty: they are written to stderr as "runnel: WARN channel <id>: <sentence>".
  std::function<void(std::string_view)> warn;
};

// ---------------------------------------------------------------------------------------------
// DurableChannel

class DurableChannel {
 public:
  // The page size of every partition scan (seed READ_BATCH_SIZE).
  static constexpr size_t kReadBatchSize = 1024;
  // The largest slot a publish may reserve: its offset must stay <= 2^64-2 so the stream's
  // next offset stays representable.
  static constexpr uint64_t kMaxSequence = ~uint64_t{0} - 2;
  // The largest partition count a channel may have (the checkpoint format numbers partitions
  // with 32 bits; this keeps per-channel state small).
  static constexpr size_t kMaxPartitionCount = 65536;
  // The key of the stream attributes (see core/attributes.h) that marks a channel's partition
  // and checkpoint streams. Their rows are the channel's (envelopes, checkpoints): layers that
  // expose streams keep other writers, deletes and trims away from streams carrying it.
  static constexpr std::string_view kAttributeKey = "runnel.channel";

  // Opens (creating missing partition streams) and recovers next sequences and the key index
  // from the stored rows (V2, V3). kInvalidArgument "ConfigError" for partition_count 0 (K1)
  // or above kMaxPartitionCount, an empty channel id, partitions tagged with another count, or
  // an untagged stream of a partition's name that already holds records (only an empty one is
  // adopted as the partition); read and decode errors as returned by the store / the decoder.
  static Result<DurableChannel> Open(std::string channel_id, size_t partition_count,
                                     StreamRegistry registry, ChannelOptions options = {});
  // Open with a partition-key function (seed with_partition_key).
  static Result<DurableChannel> WithPartitionKey(std::string channel_id, size_t partition_count,
                                                 StreamRegistry registry, PartitionKeyFn fn,
                                                 ChannelOptions options = {});
  // Open with explicit next sequences instead of recovered ones (V1: ConfigError unless
  // next_sequences.size() == partition_count >= 1). The key index is still built from the
  // stored rows. Sequences that disagree with the store are corrected by the first conflict.
  static Result<DurableChannel> FromRecoveredSequences(std::string channel_id,
                                                       size_t partition_count,
                                                       StreamRegistry registry,
                                                       std::vector<uint64_t> next_sequences,
                                                       ChannelOptions options = {});
  // Open from a validated config (F1); an ephemeral mode is ConfigError (F2). The config's
  // partition count and checkpoint policy replace those in `options`.
  static Result<DurableChannel> FromConfig(std::string channel_id, const DurabilityConfig& config,
                                           StreamRegistry registry, ChannelOptions options = {});

  // A moved-from channel may only be destroyed or assigned to. Assigning over a channel drops
  // it without the clean-stop checkpoint (like a crash); destroy it or call FlushStore first.
  DurableChannel(DurableChannel&&) noexcept;
  DurableChannel& operator=(DurableChannel&&) noexcept;
  // A clean stop: records a head checkpoint when rows were indexed since the last one (V3).
  // A failure is reported through ChannelOptions::warn.
  ~DurableChannel();
  DurableChannel(const DurableChannel&) = delete;
  DurableChannel& operator=(const DurableChannel&) = delete;

  const std::string& ChannelId() const { return channel_id_; }
  size_t PartitionCount() const { return stream_keys_.size(); }
  // nullopt for partition_index >= PartitionCount() (K5).
  std::optional<uint64_t> NextExpectedSequence(size_t partition_index) const;
  const std::vector<uint64_t>& NextSequences() const { return next_; }
  // No I/O. 0 when there is one partition or no key function, else key % count (K2).
  size_t PartitionFor(const MessageEnvelope& envelope) const;
  // "<channel_id>:<i>" (K3).
  std::string StreamKeyFor(size_t partition_index) const;
  const StreamScope& scope() const { return scope_; }

  // Publishes one envelope and returns its public offset (seed publish). See the file comment
  // for every outcome.
  Result<uint64_t> Publish(const MessageEnvelope& envelope);
  // The same with the partition and whether an earlier publish of the same idempotency key
  // already committed it (then nothing was appended and the original position is returned).
  Result<PublishReceipt> PublishWithReceipt(const MessageEnvelope& envelope);

  // The evidence of the unresolved append, if any (U2).
  const std::optional<UnresolvedAppend>& PendingAppend() const { return pending_; }
  // nullopt when nothing is pending (U3). Otherwise reads exactly the reserved slot, never
  // writes (U4): own bytes -> Committed (next moves past it); empty -> Absent; another
  // writer's row -> Absent and next moves past it. A failed read keeps the evidence and returns
  // kFailedPrecondition "PendingAppendUnreadable: ..." naming both errors (U5); LastError()
  // holds them as fields. A slot below the stream's head (removed by retention) cannot be told
  // apart and is reported the same way.
  Result<std::optional<AppendResolution>> ResolvePending();
  // Drops the evidence without settling it. Only for a caller that accepts never learning the
  // append's outcome (e.g. its slot was removed by retention); the channel then publishes again.
  void AbandonPending();

  // The streams that answer for this channel's keys (a scan; see KeyLookup).
  KeyLookup GetKeyLookup() const;
  // The original position of `key` (I1): first catches the index up with every partition
  // (reads; errors propagate, I2), then answers from it. A committed row at a slot below
  // from[p] is reported Absent, as the seed's scan from `from` would. kFailedPrecondition when
  // `key` belongs to the unresolved pending append (I3: settle it first).
  Result<AppendResolution> FindIdempotencyKey(std::string_view key,
                                              const std::vector<uint64_t>& from = {});

  // For a caller that timed out on a publish with `key` (e.g. an HTTP client asking later):
  // if the pending append holds `key`, settles it with ResolvePending (one read) and returns
  // its outcome; otherwise FindIdempotencyKey(key). Errors as those two calls.
  Result<AppendResolution> ResolveIdempotencyKey(std::string_view key);

  // The partition count recorded in the attributes of `<channel_id>:0` in `scope`, for
  // reopening a channel whose count the caller does not know. kNotFound if that stream does
  // not exist; kInvalidArgument "ConfigError" if it is not a channel partition.
  static Result<size_t> StoredPartitionCount(const StreamRegistry& registry,
                                             const StreamScope& scope, std::string_view channel_id);

  // Records a head checkpoint (V3), then Store::Flush; errors propagated (F3). Resets the
  // checkpoint counter on success. (Flushes made by the checkpoint policy only flush.)
  Status FlushStore();
  // Records a head checkpoint of the rows indexed since the last one, if any (V3). One guarded
  // append to the companion stream; on a conflict (another instance recorded first) the
  // channel follows the newer records and tries once more.
  Status RecordCheckpoint();
  // How many head checkpoint records this instance has written, and whether Open accepted a
  // stored one (false: it walked every partition).
  uint64_t CheckpointCount() const { return checkpoint_count_; }
  bool OpenedFromCheckpoint() const { return opened_from_checkpoint_; }
  // F4 bookkeeping: committed publishes since the last successful flush, and how many flushes
  // the channel has made (explicit and by policy).
  uint64_t PublishesSinceFlush() const { return since_flush_; }
  uint64_t FlushCount() const { return flush_count_; }
  const CheckpointPolicy& checkpoint_policy() const { return policy_; }

  // The structured form of the last failed call's error; cleared by a successful Publish or
  // ResolvePending.
  const std::optional<ChannelError>& LastError() const { return last_error_; }

 private:
  DurableChannel();
  static Result<DurableChannel> OpenImpl(std::string channel_id, size_t partition_count,
                                         StreamRegistry registry, ChannelOptions options,
                                         std::optional<std::vector<uint64_t>> next_sequences);
  Status OpenPartitions();
  // Reads partition p from slot scanned_[p] to its end, indexing every row and advancing
  // scanned_[p] past each one.
  Status CatchUp(size_t p);
  // Indexes the row's idempotency key, if any; fails (KeyIndexFull) only at the index's limit
  // of keys (channel::KeyIndex::kMaxEntries), leaving the row unindexed.
  Status IndexRow(size_t p, uint64_t sequence, const MessageEnvelope& envelope);
  Status IndexFull() const;
  // Sets *found to the first indexed row carrying `key` (whose KeyIndex::Hash is `hash`),
  // confirmed by reading it (the index holds hashes), or to nullopt; read and decode errors
  // are returned, never taken for "absent". (An out-parameter: the miss path of every
  // idempotent publish builds no Result.)
  Status IndexLookup(std::string_view key, uint64_t hash,
                     std::optional<AppendResolution>* found) const;
  // The append of one row to partition p (timestamped now), without its expected offset.
  AppendRequest RowRequest(size_t p, const std::string& bytes,
                           const std::optional<std::string>& record_key) const;
  // Sends `request` guarded to land at slot `sequence` and waits for its outcome.
  Result<AppendResult> AppendAt(uint64_t sequence, AppendRequest&& request);
  Result<std::optional<AppendResolution>> ResolveImpl();
  Status AfterCommit();
  Status FlushOnly();
  Status Fail(ChannelError error);
  // V3: reads and verifies the stored chain, loading the index and scanned_ from it. Returns
  // whether it was accepted; read errors are returned (never taken for "missing").
  Result<bool> LoadCheckpoint();
  // Reads companion records from checkpoint_next_ on, following the chain (conflict path).
  Status FollowCheckpoints();
  Status AppendCheckpoint();
  void Warn(const std::string& sentence) const;

  std::string channel_id_;
  StreamScope scope_ = StreamScope::Global();
  std::optional<StreamRegistry> registry_;
  PartitionKeyFn partition_key_;
  CheckpointPolicy policy_;
  bool check_all_partitions_ = false;
  std::vector<std::string> stream_keys_;
  std::vector<StreamId> stream_ids_;
  // Invariant: next_[p] is the slot the next publish to p reserves.
  std::vector<uint64_t> next_;
  // Invariant: index_ holds every keyed row in slots [0, scanned_[p]) of every partition p.
  std::vector<uint64_t> scanned_;
  std::unique_ptr<channel::KeyIndex> index_;
  // V3 head checkpoint. ck_head_/ck_fp_: the head and fingerprints of the chain's last record
  // (as far as this instance knows). Invariant: the index entries numbered recorded_ and up
  // hold every keyed row indexed at a slot >= ck_head_[p] (and maybe some below, which are
  // skipped). last_fp_[p]: the
  // fingerprint of the row at scanned_[p]-1, 0 when unknown.
  std::function<void(std::string_view)> warn_;
  std::string checkpoint_key_;
  std::optional<StreamId> checkpoint_id_;
  uint64_t checkpoint_next_ = 1;  // the companion offset the next record must take
  std::vector<uint64_t> ck_head_;
  std::vector<uint64_t> ck_fp_;
  std::vector<uint64_t> last_fp_;
  size_t recorded_ = 0;
  std::vector<channel::CheckpointEntry> checkpoint_entries_;  // AppendCheckpoint's buffer
  bool need_base_ = true;
  bool opened_from_checkpoint_ = false;
  uint64_t since_checkpoint_ = 0;
  uint64_t checkpoint_count_ = 0;
  // False in a moved-from channel (its destructor does nothing).
  struct Live {
    bool value = false;
    Live() = default;
    Live(Live&& o) noexcept : value(o.value) { o.value = false; }
    Live& operator=(Live&& o) noexcept {
      value = o.value;
      o.value = false;
      return *this;
    }
  } live_;
  std::optional<UnresolvedAppend> pending_;
  std::optional<ChannelError> last_error_;
  uint64_t since_flush_ = 0;
  uint64_t flush_count_ = 0;
};

// ---------------------------------------------------------------------------------------------
// EphemeralChannel: the same partitioning in process memory. It has no store and makes no store
// calls (K8); everything is lost with the object. Not thread-safe.
class EphemeralChannel {
 public:
  // ConfigError for partition_count 0 (K1).
  static Result<EphemeralChannel> Create(std::string channel_id, size_t partition_count,
                                         PartitionKeyFn partition_key = nullptr);
  // ConfigError unless config.mode is kEphemeral and the config validates (F1, F2).
  static Result<EphemeralChannel> FromConfig(std::string channel_id, const DurabilityConfig& config,
                                             PartitionKeyFn partition_key = nullptr);

  const std::string& ChannelId() const { return channel_id_; }
  size_t PartitionCount() const { return partitions_.size(); }
  size_t PartitionFor(const MessageEnvelope& envelope) const;
  std::optional<uint64_t> NextExpectedSequence(size_t partition_index) const;
  // Returns the public offset (slot + 1); kOutOfRange past kMaxSequence.
  Result<uint64_t> Publish(const MessageEnvelope& envelope);
  // The envelopes of one partition, in slot order; empty for a bad index.
  const std::vector<MessageEnvelope>& Partition(size_t partition_index) const;

 private:
  EphemeralChannel() = default;
  std::string channel_id_;
  PartitionKeyFn partition_key_;
  std::vector<std::vector<MessageEnvelope>> partitions_;
};

}  // namespace runnel

#endif  // RUNNEL_CHANNEL_H_
