// A Store wrapper that injects the outcomes a durable channel must survive, around any store.
//
// Append faults are queued and consumed one per Append call, in order:
//   kLandedReplyLost        the append is applied, the reply says kOutcomeUnknown
//   kNotLanded              nothing is applied, the reply says kOutcomeUnknown
//   kForeignInSlotThenUnknown  another writer's row lands in the requested slot; this append
//                           is not applied and its reply says kOutcomeUnknown
//   kForeignWriterFirst     another writer's row lands at the tail first, then the append is
//                           forwarded (so a guarded append meets a real conflict)
//   kOutOfRange             refused with kOutOfRange, nothing applied
// Read, ReadAt and Flush failures are counted down: the next n calls fail with the given
// status. Every call is counted, and the expected_offset of every append is recorded, and so
// is the number of records each stream's Read calls returned.
//
// Thread-safety: like any Store, callable from any thread.
#ifndef RUNNEL_TESTS_CHANNEL_FAULTY_STORE_H_
#define RUNNEL_TESTS_CHANNEL_FAULTY_STORE_H_

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runnel/channel.h"
#include "runnel/store.h"

namespace runnel::testing {

class FaultyStore final : public Store {
 public:
  enum class AppendFault {
    kLandedReplyLost,
    kNotLanded,
    kForeignInSlotThenUnknown,
    kForeignWriterFirst,
    kOutOfRange,
  };

  explicit FaultyStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  void InjectAppendFault(AppendFault fault, int times = 1) {
    std::lock_guard lock(mu_);
    for (int i = 0; i < times; ++i) append_faults_.push_back(fault);
  }
  // Drops the append faults no Append call consumed yet.
  void ClearAppendFaults() {
    std::lock_guard lock(mu_);
    append_faults_.clear();
  }
  void FailReads(int times, Status status = Status::IOError("injected read failure")) {
    std::lock_guard lock(mu_);
    read_failures_ = times;
    read_status_ = std::move(status);
  }
  void FailReadAts(int times, Status status = Status::IOError("injected read_at failure")) {
    std::lock_guard lock(mu_);
    read_at_failures_ = times;
    read_at_status_ = std::move(status);
  }
  void FailFlushes(int times, Status status = Status::IOError("injected flush failure")) {
    std::lock_guard lock(mu_);
    flush_failures_ = times;
    flush_status_ = std::move(status);
  }
  // The envelope the injected "other writer" writes next (its payload gets a counter suffix).
  void SetForeignEnvelope(MessageEnvelope envelope) {
    std::lock_guard lock(mu_);
    foreign_ = std::move(envelope);
  }

  uint64_t calls() const { return calls_.load(); }
  uint64_t appends() const { return appends_.load(); }
  uint64_t reads() const { return reads_.load(); }
  uint64_t read_ats() const { return read_ats_.load(); }
  uint64_t flushes() const { return flushes_.load(); }
  uint64_t foreign_writes() const { return foreign_writes_.load(); }
  // Records returned by Read calls on stream `id` so far.
  uint64_t rows_read(StreamId id) const {
    std::lock_guard lock(mu_);
    auto it = rows_read_.find(id);
    return it == rows_read_.end() ? 0 : it->second;
  }
  // The expected_offset of every Append call, in order (nullopt for unguarded ones).
  std::vector<std::optional<uint64_t>> expected_offsets() const {
    std::lock_guard lock(mu_);
    return expected_offsets_;
  }
  Store& inner() { return *inner_; }

  // --- Store ---
  std::string_view Name() const override { return inner_->Name(); }
  std::string Durability() const override { return inner_->Durability(); }
  Result<StreamInfo> CreateStream(const StreamSpec& spec) override {
    ++calls_;
    return inner_->CreateStream(spec);
  }
  Result<StreamInfo> GetStream(std::string_view ns, std::string_view name) override {
    ++calls_;
    return inner_->GetStream(ns, name);
  }
  Result<StreamInfo> GetStreamById(StreamId id) override {
    ++calls_;
    return inner_->GetStreamById(id);
  }
  Result<std::vector<StreamInfo>> ListStreams(std::string_view ns, std::string_view start_after,
                                              size_t limit) override {
    ++calls_;
    return inner_->ListStreams(ns, start_after, limit);
  }
  Result<std::vector<StreamInfo>> ListStreamsByNaturalKey(std::string_view ns,
                                                          std::string_view from_key,
                                                          size_t limit) override {
    ++calls_;
    return inner_->ListStreamsByNaturalKey(ns, from_key, limit);
  }
  Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                      std::string_view attributes,
                      std::optional<std::string_view> expected_attributes,
                      std::optional<uint64_t> expected_next_offset) override {
    ++calls_;
    return inner_->UpdateStream(id, retention, attributes, expected_attributes,
                                expected_next_offset);
  }
  Status DeleteStream(StreamId id) override {
    ++calls_;
    return inner_->DeleteStream(id);
  }

  void Append(AppendRequest request, AppendCallback done) override {
    ++calls_;
    ++appends_;
    std::optional<AppendFault> fault;
    {
      std::lock_guard lock(mu_);
      expected_offsets_.push_back(request.expected_offset);
      if (!append_faults_.empty()) {
        fault = append_faults_.front();
        append_faults_.pop_front();
      }
    }
    if (!fault) {
      inner_->Append(std::move(request), std::move(done));
      return;
    }
    switch (*fault) {
      case AppendFault::kLandedReplyLost:
        inner_->Append(std::move(request), [done = std::move(done)](Result<AppendResult>) {
          done(Status::OutcomeUnknown("injected: the append landed but its reply was lost"));
        });
        return;
      case AppendFault::kNotLanded:
        done(Status::OutcomeUnknown("injected: the connection dropped before the append landed"));
        return;
      case AppendFault::kForeignInSlotThenUnknown: {
        Status s = WriteForeign(request.stream, request.expected_offset);
        if (!s.ok()) {
          done(s);
          return;
        }
        done(Status::OutcomeUnknown("injected: timed out while another writer took the slot"));
        return;
      }
      case AppendFault::kForeignWriterFirst: {
        Status s = WriteForeign(request.stream, std::nullopt);
        if (!s.ok()) {
          done(s);
          return;
        }
        inner_->Append(std::move(request), std::move(done));
        return;
      }
      case AppendFault::kOutOfRange:
        done(Status::OutOfRange("injected: the stream would pass the largest offset"));
        return;
    }
  }

  Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                         size_t max_bytes) override {
    ++calls_;
    ++reads_;
    if (Status s = TakeFailure(read_failures_, read_status_); !s.ok()) return s;
    auto rows = inner_->Read(id, from, limit, max_bytes);
    if (rows.ok()) {
      std::lock_guard lock(mu_);
      rows_read_[id] += rows->size();
    }
    return rows;
  }
  Result<std::optional<StoredRecord>> ReadAt(StreamId id, uint64_t offset) override {
    ++calls_;
    ++read_ats_;
    if (Status s = TakeFailure(read_at_failures_, read_at_status_); !s.ok()) return s;
    return inner_->ReadAt(id, offset);
  }
  Result<uint64_t> TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) override {
    ++calls_;
    return inner_->TruncatePrefix(id, through, respect_cursors);
  }
  Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                uint64_t now_ms) override {
    ++calls_;
    return inner_->CommitCursor(id, consumer, offset, now_ms);
  }
  Result<std::optional<CursorState>> GetCursor(StreamId id, std::string_view consumer) override {
    ++calls_;
    return inner_->GetCursor(id, consumer);
  }
  Result<std::vector<CursorState>> ListCursors(StreamId id) override {
    ++calls_;
    return inner_->ListCursors(id);
  }
  Result<bool> DeleteCursor(StreamId id, std::string_view consumer) override {
    ++calls_;
    return inner_->DeleteCursor(id, consumer);
  }
  Result<std::optional<ProducerState>> GetProducer(StreamId id,
                                                   std::string_view producer_id) override {
    ++calls_;
    return inner_->GetProducer(id, producer_id);
  }
  Status Flush() override {
    ++calls_;
    ++flushes_;
    if (Status s = TakeFailure(flush_failures_, flush_status_); !s.ok()) return s;
    return inner_->Flush();
  }
  void SetTailListener(TailListener listener) override {
    inner_->SetTailListener(std::move(listener));
  }

 private:
  Status TakeFailure(int& remaining, const Status& status) {
    std::lock_guard lock(mu_);
    if (remaining <= 0) return Status::OK();
    --remaining;
    return status;
  }

  // Another writer's row, appended straight to the inner store (at `at` when given).
  Status WriteForeign(StreamId stream, std::optional<uint64_t> at) {
    MessageEnvelope env;
    {
      std::lock_guard lock(mu_);
      env = foreign_;
    }
    const uint64_t n = ++foreign_writes_;
    env.payload += "-" + std::to_string(n);
    AppendRequest request;
    request.stream = stream;
    request.records.push_back(AppendRecord{env.key, EncodeEnvelope(env)});
    request.now_ms = env.timestamp_ms;
    request.expected_offset = at;
    std::promise<Status> promise;
    auto future = promise.get_future();
    inner_->Append(std::move(request), [&promise](Result<AppendResult> r) {
      promise.set_value(r.ok() ? Status::OK() : r.status());
    });
    return future.get();
  }

  std::unique_ptr<Store> inner_;
  mutable std::mutex mu_;
  std::deque<AppendFault> append_faults_;                  // GUARDED_BY(mu_)
  std::vector<std::optional<uint64_t>> expected_offsets_;  // GUARDED_BY(mu_)
  std::map<StreamId, uint64_t> rows_read_;                 // GUARDED_BY(mu_)
  int read_failures_ = 0;                                  // GUARDED_BY(mu_)
  int read_at_failures_ = 0;                               // GUARDED_BY(mu_)
  int flush_failures_ = 0;                                 // GUARDED_BY(mu_)
  Status read_status_;                                     // GUARDED_BY(mu_)
  Status read_at_status_;                                  // GUARDED_BY(mu_)
  Status flush_status_;                                    // GUARDED_BY(mu_)
  MessageEnvelope foreign_{"foreign",      std::nullopt, 7,
                           "other-writer", std::nullopt, std::nullopt};  // GUARDED_BY(mu_)
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> appends_{0};
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> read_ats_{0};
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> foreign_writes_{0};
};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_CHANNEL_FAULTY_STORE_H_
