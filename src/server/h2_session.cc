#include "server/h2_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <new>

namespace runnel::server {

struct H2Session::Stream {
  H2Request request;
  std::chrono::steady_clock::time_point begun = std::chrono::steady_clock::now();
  size_t header_bytes = 0;
  bool reported = false;  // on_request ran for it
  // A response's body not yet handed to nghttp2: queue[sent...].
  std::string queue;
  size_t sent = 0;
  bool eof = false;       // nothing more will be appended
  bool deferred = false;  // the data source said NGHTTP2_ERR_DEFERRED; Append resumes it
};

// nghttp2's C callbacks, with access to the session's privates.
struct H2Glue {
  static void Report(H2Session* self, H2Session::Stream* s) {
    if (s->reported) return;
    s->reported = true;
    self->receiving_ -= s->request.body.size();  // handed over with the request
    if (self->callbacks_.on_request) self->callbacks_.on_request(std::move(s->request));
  }

  static void Refuse(H2Session* self, H2Session::Stream* s, int status, std::string message) {
    if (s->request.refuse_status != 0) return;
    s->request.refuse_status = status;
    s->request.refuse_message = std::move(message);
    self->receiving_ -= s->request.body.size();
    s->request.body.clear();
    s->request.body.shrink_to_fit();
  }

  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    H2Session* self = H2Session::Of(user);
    auto s = std::make_unique<H2Session::Stream>();
    s->request.stream_id = frame->hd.stream_id;
    self->streams_[frame->hd.stream_id] = std::move(s);
    return 0;
  }

  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    H2Session* self = H2Session::Of(user);
    H2Session::Stream* s = self->Find(frame->hd.stream_id);
    if (s == nullptr || s->reported) return 0;  // trailer fields of a refused request
    s->header_bytes += namelen + valuelen + 32;
    if (s->header_bytes > self->limits_.max_header_bytes) {
      Refuse(self, s, 431, "request headers are too large");
    }
    if (s->request.refuse_status != 0) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":method") {
      s->request.method = v;
    } else if (n == ":path") {
      if (v.size() > self->limits_.max_url_bytes) {
        Refuse(self, s, 414, "request URL is too long");
        return 0;
      }
      s->request.target = v;
    } else if (n == ":authority") {
      s->request.authority = v;
    } else if (!n.empty() && n[0] != ':') {
      // HTTP/2 field names are lower-case already (nghttp2 refuses others).
      auto [it, inserted] = s->request.headers.emplace(std::string(n), std::string(v));
      if (!inserted) it->second.append(n == "cookie" ? "; " : ", ").append(v);
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user) {
    H2Session* self = H2Session::Of(user);
    H2Session::Stream* s = self->Find(stream_id);
    if (s == nullptr || s->reported) return 0;  // dropped; the window is still given back
    if (s->request.refuse_status != 0) return 0;
    if (s->request.body.size() + len > self->limits_.max_body_bytes) {
      Refuse(self, s, 413, "request body is larger than the server's limit");
      Report(self, s);  // answered now; what follows is dropped
      return 0;
    }
    if (self->receiving_ + len > self->limits_.max_connection_body_bytes) {
      Refuse(self, s, 503,
             "the request bodies this connection is sending at once pass the server's limit; "
             "send fewer at a time");
      Report(self, s);
      return 0;
    }
    s->request.body.append(reinterpret_cast<const char*>(data), len);
    self->receiving_ += len;
    return 0;
  }

  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    H2Session* self = H2Session::Of(user);
    H2Session::Stream* s = self->Find(frame->hd.stream_id);
    if (s == nullptr) return 0;
    const bool end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (end || (frame->hd.type == NGHTTP2_HEADERS && s->request.refuse_status != 0)) {
      Report(self, s);
    }
    return 0;
  }

  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user) {
    H2Session* self = H2Session::Of(user);
    auto it = self->streams_.find(stream_id);
    if (it == self->streams_.end()) return 0;
    const bool reported = it->second->reported;
    self->queued_ -= it->second->queue.size() - it->second->sent;
    if (!reported) self->receiving_ -= it->second->request.body.size();
    self->streams_.erase(it);
    if (reported && self->callbacks_.on_stream_closed) self->callbacks_.on_stream_closed(stream_id);
    return 0;
  }

  static ssize_t ReadData(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source*, void* user) {
    H2Session* self = H2Session::Of(user);
    H2Session::Stream* s = self->Find(stream_id);
    if (s == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    const size_t n = std::min(length, s->queue.size() - s->sent);
    if (n > 0) std::memcpy(buf, s->queue.data() + s->sent, n);
    s->sent += n;
    self->queued_ -= n;
    if (s->sent == s->queue.size()) {
      s->queue.clear();
      s->sent = 0;
      if (s->eof) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
      } else if (n == 0) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
      }
    } else if (s->sent >= (64u << 10)) {
      s->queue.erase(0, s->sent);  // what went out leaves the queue in large steps
      s->sent = 0;
    }
    return static_cast<ssize_t>(n);
  }
};

H2Session::H2Session(const H2Limits& limits, Callbacks callbacks)
    : limits_(limits), callbacks_(std::move(callbacks)) {
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) throw std::bad_alloc();
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &H2Glue::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &H2Glue::OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &H2Glue::OnDataChunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &H2Glue::OnFrameRecv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &H2Glue::OnStreamClose);
  const int rv = nghttp2_session_server_new(&session_, cbs, this);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) throw std::bad_alloc();
  // Stated rather than left to defaults: each stream may have at most 64 KiB of request body in
  // flight unacknowledged (the protocol's initial window), and the connection as much.
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
       static_cast<uint32_t>(limits_.max_concurrent_streams)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(limits_.max_header_bytes)},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, NGHTTP2_INITIAL_WINDOW_SIZE},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
}

H2Session::~H2Session() {
  nghttp2_session_del(session_);
}

H2Session::Stream* H2Session::Find(int32_t id) const {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

bool H2Session::Upgrade(std::string_view settings, bool head_request) {
  if (nghttp2_session_upgrade2(session_, reinterpret_cast<const uint8_t*>(settings.data()),
                               settings.size(), head_request ? 1 : 0, nullptr) != 0) {
    return false;
  }
  auto s = std::make_unique<Stream>();
  s->request.stream_id = 1;
  s->reported = true;
  streams_[1] = std::move(s);
  return true;
}

bool H2Session::Receive(std::string_view bytes) {
  if (failed_) return false;
  const ssize_t rv = nghttp2_session_mem_recv(
      session_, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (rv < 0) {
    failed_ = true;
    return false;
  }
  return true;
}

void H2Session::Collect(std::string* out) {
  if (failed_) return;
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      failed_ = true;
      return;
    }
    if (n == 0) return;
    out->append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
}

bool H2Session::Alive() const {
  return !failed_ &&
         (nghttp2_session_want_read(session_) != 0 || nghttp2_session_want_write(session_) != 0);
}

bool H2Session::Respond(int32_t stream_id, int status,
                        const std::vector<std::pair<std::string, std::string>>& headers,
                        std::string body, bool streaming) {
  Stream* s = Find(stream_id);
  if (s == nullptr) return false;
  const std::string status_text = std::to_string(status);
  // Lower-case names, without the connection-specific fields HTTP/2 forbids (RFC 9113 8.2.2).
  std::vector<std::pair<std::string, std::string_view>> fields;
  fields.reserve(headers.size());
  for (const auto& [name, value] : headers) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "connection" || lower == "keep-alive" || lower == "transfer-encoding" ||
        lower == "upgrade" || lower == "proxy-connection") {
      continue;
    }
    fields.emplace_back(std::move(lower), value);
  }
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size() + 1);
  auto add = [&nva](std::string_view name, std::string_view value) {
    nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                   reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                   value.size(), NGHTTP2_NV_FLAG_NONE});
  };
  add(":status", status_text);
  for (const auto& [name, value] : fields) add(name, value);
  const bool has_body = streaming || !body.empty();
  queued_ -= s->queue.size() - s->sent;
  queued_ += body.size();
  s->queue = std::move(body);
  s->sent = 0;
  s->eof = !streaming;
  nghttp2_data_provider provider{};
  provider.read_callback = &H2Glue::ReadData;
  const int rv = nghttp2_submit_response(session_, stream_id, nva.data(), nva.size(),
                                         has_body ? &provider : nullptr);
  return rv == 0;
}

bool H2Session::Append(int32_t stream_id, std::string_view data) {
  Stream* s = Find(stream_id);
  if (s == nullptr || s->eof) return false;
  s->queue.append(data);
  queued_ += data.size();
  if (s->deferred) {
    s->deferred = false;
    nghttp2_session_resume_data(session_, stream_id);
  }
  return true;
}

void H2Session::End(int32_t stream_id) {
  Stream* s = Find(stream_id);
  if (s == nullptr || s->eof) return;
  s->eof = true;
  if (s->deferred) {
    s->deferred = false;
    nghttp2_session_resume_data(session_, stream_id);
  }
}

void H2Session::Reset(int32_t stream_id, uint32_t error_code) {
  if (Find(stream_id) == nullptr) return;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, error_code);
}

size_t H2Session::Queued(int32_t stream_id) const {
  const Stream* s = Find(stream_id);
  return s == nullptr ? 0 : s->queue.size() - s->sent;
}

bool H2Session::RequestOverdue(std::chrono::steady_clock::duration limit,
                               std::chrono::steady_clock::time_point now) const {
  for (const auto& [id, s] : streams_) {
    if (!s->reported && now - s->begun > limit) return true;
  }
  return false;
}

bool H2Session::Open(int32_t stream_id) const {
  return Find(stream_id) != nullptr;
}

void H2Session::Shutdown() {
  // GOAWAY naming the last stream taken: those finish, no new one starts, and once none is
  // open the session wants neither to read nor to write.
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
}

}  // namespace runnel::server
