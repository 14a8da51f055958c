// The in-memory store: the reference implementation of the store contract.
//
// Everything lives in process memory; an acknowledged append is lost when the process exits.
// Appends complete synchronously on the calling thread.
//
// Thread-safety: a shared mutex guards the catalog maps; each stream has its own mutex that
// serialises appends, reads, truncation and cursor commits on that stream, so appends to
// different streams never contend beyond the catalog's shared lock.
#ifndef RUNNEL_STORE_MEMORY_MEMORY_STORE_H_
#define RUNNEL_STORE_MEMORY_MEMORY_STORE_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "base/mutex.h"
#include "runnel/store.h"
#include "store/natural_index.h"

namespace runnel::store {

class MemoryStore final : public Store {
 public:
  MemoryStore() = default;

  std::string_view Name() const override { return "memory"; }
  std::string Durability() const override { return "process-local: lost when the process exits"; }

  Result<StreamInfo> CreateStream(const StreamSpec& spec) override;
  Result<StreamInfo> GetStream(std::string_view ns, std::string_view name) override;
  Result<StreamInfo> GetStreamById(StreamId id) override;
  Result<std::vector<StreamInfo>> ListStreams(std::string_view ns, std::string_view start_after,
                                              size_t limit) override;
  Result<std::vector<StreamInfo>> ListStreamsByNaturalKey(std::string_view ns,
                                                          std::string_view from_key,
                                                          size_t limit) override;
  Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                      std::string_view attributes,
                      std::optional<std::string_view> expected_attributes,
                      std::optional<uint64_t> expected_next_offset) override;
  Status DeleteStream(StreamId id) override;
  void Append(AppendRequest request, AppendCallback done) override;
  Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                         size_t max_bytes) override;
  Result<std::optional<StoredRecord>> ReadAt(StreamId id, uint64_t offset) override;
  Result<uint64_t> TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) override;
  Result<uint64_t> DropRecords(StreamId id, const std::vector<uint64_t>& offsets) override;
  bool SupportsDropRecords() const override { return true; }
  Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                uint64_t now_ms) override;
  Result<std::optional<CursorState>> GetCursor(StreamId id, std::string_view consumer) override;
  Result<std::vector<CursorState>> ListCursors(StreamId id) override;
  Result<bool> DeleteCursor(StreamId id, std::string_view consumer) override;
  Result<std::optional<ProducerState>> GetProducer(StreamId id,
                                                   std::string_view producer_id) override;
  Status Flush() override { return Status::OK(); }
  void SetTailListener(TailListener listener) override;

 private:
  struct Stream {
    Stream(StreamId stream_id, std::string stream_ns, std::string stream_name)
        : id(stream_id), ns(std::move(stream_ns)), name(std::move(stream_name)) {}

    Mutex mu;
    // Fixed at creation; read without the lock.
    const StreamId id;
    const std::string ns;
    const std::string name;
    StreamSpec spec RUNNEL_GUARDED_BY(mu);  // for retention and attributes
    uint64_t next_offset RUNNEL_GUARDED_BY(mu) = 1;
    uint64_t bytes RUNNEL_GUARDED_BY(mu) = 0;
    bool closed RUNNEL_GUARDED_BY(mu) = false;
    bool deleted RUNNEL_GUARDED_BY(mu) = false;
    // Invariant: ascending; records.front().offset is the head. Dense unless DropRecords removed
    // records from the middle (then found by binary search).
    std::deque<StoredRecord> records RUNNEL_GUARDED_BY(mu);
    std::map<std::string, CursorState, std::less<>> cursors RUNNEL_GUARDED_BY(mu);
    std::map<std::string, ProducerState, std::less<>> producers RUNNEL_GUARDED_BY(mu);
  };

  std::shared_ptr<Stream> Find(StreamId id);
  static StreamInfo Snapshot(const Stream& s) RUNNEL_REQUIRES(s.mu);
  static void ApplyRetention(Stream& s, uint64_t now_ms) RUNNEL_REQUIRES(s.mu);
  static void DropOldest(Stream& s, size_t n) RUNNEL_REQUIRES(s.mu);

  SharedMutex catalog_mu_;
  StreamId next_id_ RUNNEL_GUARDED_BY(catalog_mu_) = 1;
  // ns -> name -> stream
  std::map<std::string, std::map<std::string, std::shared_ptr<Stream>, std::less<>>, std::less<>>
      by_name_ RUNNEL_GUARDED_BY(catalog_mu_);
  std::unordered_map<StreamId, std::shared_ptr<Stream>> by_id_ RUNNEL_GUARDED_BY(catalog_mu_);
  // The same streams by (ns, natural key).
  struct StreamName {
    std::string_view operator()(const std::shared_ptr<Stream>& s) const { return s->name; }
  };
  NaturalIndex<std::shared_ptr<Stream>, StreamName> natural_ RUNNEL_GUARDED_BY(catalog_mu_);

  Mutex listener_mu_;
  std::shared_ptr<const TailListener> listener_ RUNNEL_GUARDED_BY(listener_mu_);
};

}  // namespace runnel::store

#endif  // RUNNEL_STORE_MEMORY_MEMORY_STORE_H_
