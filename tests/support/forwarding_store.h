// ForwardingStore: a Store that passes every call to an inner store (a memory store unless one
// is given). Tests derive from it and override only the calls they watch or delay. Several
// forwarding stores may share one inner store: registries over them are nodes over one
// database.
#ifndef RUNNEL_TESTS_SUPPORT_FORWARDING_STORE_H_
#define RUNNEL_TESTS_SUPPORT_FORWARDING_STORE_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runnel/store.h"

namespace runnel::testing {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::shared_ptr<Store> inner = NewMemoryStore())
      : inner_(std::move(inner)) {}

  std::string_view Name() const override { return inner_->Name(); }
  std::string Durability() const override { return inner_->Durability(); }
  Result<StreamInfo> CreateStream(const StreamSpec& spec) override {
    return inner_->CreateStream(spec);
  }
  Result<StreamInfo> GetStream(std::string_view ns, std::string_view name) override {
    return inner_->GetStream(ns, name);
  }
  Result<StreamInfo> GetStreamById(StreamId id) override { return inner_->GetStreamById(id); }
  Result<std::vector<StreamInfo>> ListStreams(std::string_view ns, std::string_view start_after,
                                              size_t limit) override {
    return inner_->ListStreams(ns, start_after, limit);
  }
  Result<std::vector<StreamInfo>> ListStreamsByNaturalKey(std::string_view ns,
                                                          std::string_view from_key,
                                                          size_t limit) override {
    return inner_->ListStreamsByNaturalKey(ns, from_key, limit);
  }
  Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                      std::string_view attributes,
                      std::optional<std::string_view> expected_attributes,
                      std::optional<uint64_t> expected_next_offset) override {
    return inner_->UpdateStream(id, retention, attributes, expected_attributes,
                                expected_next_offset);
  }
  Status DeleteStream(StreamId id) override { return inner_->DeleteStream(id); }
  void Append(AppendRequest request, AppendCallback done) override {
    inner_->Append(std::move(request), std::move(done));
  }
  Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                         size_t max_bytes) override {
    return inner_->Read(id, from, limit, max_bytes);
  }
  Result<std::optional<StoredRecord>> ReadAt(StreamId id, uint64_t offset) override {
    return inner_->ReadAt(id, offset);
  }
  Result<uint64_t> TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) override {
    return inner_->TruncatePrefix(id, through, respect_cursors);
  }
  Result<uint64_t> DropRecords(StreamId id, const std::vector<uint64_t>& offsets) override {
    return inner_->DropRecords(id, offsets);
  }
  bool SupportsDropRecords() const override { return inner_->SupportsDropRecords(); }
  Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                uint64_t now_ms) override {
    return inner_->CommitCursor(id, consumer, offset, now_ms);
  }
  Result<std::optional<CursorState>> GetCursor(StreamId id, std::string_view consumer) override {
    return inner_->GetCursor(id, consumer);
  }
  Result<std::vector<CursorState>> ListCursors(StreamId id) override {
    return inner_->ListCursors(id);
  }
  Result<bool> DeleteCursor(StreamId id, std::string_view consumer) override {
    return inner_->DeleteCursor(id, consumer);
  }
  Result<std::optional<ProducerState>> GetProducer(StreamId id,
                                                   std::string_view producer_id) override {
    return inner_->GetProducer(id, producer_id);
  }
  Status Flush() override { return inner_->Flush(); }
  void SetTailListener(TailListener listener) override {
    inner_->SetTailListener(std::move(listener));
  }
  void SetWatchedStreams(WatchedStreams watched) override {
    inner_->SetWatchedStreams(std::move(watched));
  }
  void ReaderWaiting(StreamId id) override { inner_->ReaderWaiting(id); }
  StoreCommitStats CommitStats() const override { return inner_->CommitStats(); }
  bool CallsMayBlock() const override { return inner_->CallsMayBlock(); }
  bool SharedWithOtherNodes() const override { return inner_->SharedWithOtherNodes(); }

 protected:
  Store& inner() { return *inner_; }

 private:
  std::shared_ptr<Store> inner_;
};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_FORWARDING_STORE_H_
