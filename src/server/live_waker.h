// The wake-ups of live readers (long-polls and SSE responses waiting for records), shared by the
// HTTP/1.1 and HTTP/2 paths of the HTTP edge (http_live.cc): a Waker per reader, whose timer a
// registry subscription hint cancels; a WakeQueue per io thread, which hands the hints of one
// append to that thread's readers in one batch; and the state an SSE reader parks between
// events, so the io thread can write its next event in place.
#ifndef RUNNEL_SERVER_LIVE_WAKER_H_
#define RUNNEL_SERVER_LIVE_WAKER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "server/http_net.h"
#include "server/stream_service.h"

namespace runnel::server {

class WakeQueue;

// An SSE reader parked between events (see HttpServer::Impl::DeliverParked): what the io
// thread needs to write the next event itself, without resuming the reader's coroutine.
struct SseParked {
  ReadState* state = nullptr;     // the coroutine's; the position moves with each event
  tcp::socket* socket = nullptr;  // plain TCP only: null on TLS (never delivered in place)
  std::string pending;            // bytes of an event the socket did not take; the coroutine
                                  // writes them before anything else
  bool failed = false;            // a write failed; the coroutine ends the response
};

// A live reader's wake-up: a timer the subscription hint (or shutdown) cancels.
struct Waker {
  Waker(const net::any_io_executor& ex, WakeQueue* q) : timer(ex), queue(q) {}
  net::steady_timer timer;
  WakeQueue* const queue;       // of the connection's io thread
  SseParked* parked = nullptr;  // connection thread only: set while an SSE reader waits
  bool hinted = false;          // connection thread only
  bool stopped = false;         // connection thread only
  bool hung_up = false;         // connection thread only: the reader closed its connection
  bool watching = false;        // connection thread only: a hang-up watch is pending
  bool sse = false;             // connection thread only: an SSE reader whose access is rechecked
  bool recheck = false;         // connection thread only: its caller's token must be rechecked
  // Connection thread only: set while the reader waits in an asynchronous write to a full
  // socket. A hang-up or a shutdown cancels that write instead of waiting for its timeout.
  tcp::socket* writing = nullptr;
};

// Cancels the asynchronous write a live reader is stuck in, if any (connection thread only).
void CancelStuckWrite(Waker& waker);

// Watches a live reader's socket while its response waits for records: a reader that closes
// its connection is noticed at once (its Waker wakes with hung_up set), not at the next write
// or the end of the wait. Nothing is consumed from the socket: a readable socket is peeked,
// and only an orderly close or an error counts; bytes the client sent end the watch.
void WatchHangUp(tcp::socket& socket, const std::shared_ptr<Waker>& waker);

// Ends a hang-up watch before the connection reads its next request.
void StopWatchingHangUp(tcp::socket& socket, Waker& waker);

// The event last written in place during one batch of wake-ups: the readers of a stream at the
// same position, with the same cursor and encoding, get the same bytes, read and framed once.
struct DeliveryMemo {
  bool valid = false;
  StreamId id = 0;
  uint64_t position = 0;
  bool base64 = false;
  std::optional<std::string> client_cursor;
  uint64_t next = 0;         // the position after the event
  std::string chunk;         // the whole HTTP chunk: size line, data and control events, CRLF
  uint64_t event_bytes = 0;  // of the two events

  bool Matches(const ReadState& s) const {
    return valid && id == s.id && position == s.position && base64 == s.base64 &&
           client_cursor == s.client_cursor;
  }
};

// Wake-ups for the live readers of one io thread, handed over in batches: an append that hints
// thousands of readers (from a store thread) posts once per io thread, not once per reader.
class WakeQueue {
 public:
  // `wake` runs on the io thread for each live waker of a batch.
  WakeQueue(net::io_context& ioc, std::function<void(Waker&, DeliveryMemo&)> wake)
      : ioc_(ioc), wake_(std::move(wake)) {}

  // Any thread.
  void Push(std::weak_ptr<Waker> waker) {
    bool first;
    {
      MutexLock lock(mu_);
      first = pending_.empty();
      pending_.push_back(std::move(waker));
    }
    if (first) net::post(ioc_, [this] { Drain(); });
  }

 private:
  void Drain() {
    {
      MutexLock lock(mu_);
      draining_.swap(pending_);
    }
    DeliveryMemo memo;
    for (const std::weak_ptr<Waker>& weak : draining_) {
      if (auto w = weak.lock()) wake_(*w, memo);
    }
    draining_.clear();
  }

  net::io_context& ioc_;
  const std::function<void(Waker&, DeliveryMemo&)> wake_;
  Mutex mu_;
  std::vector<std::weak_ptr<Waker>> pending_ RUNNEL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<Waker>> draining_;  // the io thread only
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_LIVE_WAKER_H_
