// H2Session against an nghttp2 client session in memory: requests reported whole, answers and
// streamed answers received, the limits, and a client reset reported as a closed stream.
#include "server/h2_session.h"

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <map>
#include <string>
#include <vector>

namespace runnel::server {
namespace {

// A client session and what it received, by stream.
class Client {
 public:
  Client() {
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                const uint8_t* value, size_t valuelen, uint8_t, void* user) {
          auto* self = static_cast<Client*>(user);
          self->headers[frame->hd.stream_id]
                       [std::string(reinterpret_cast<const char*>(name), namelen)] =
              std::string(reinterpret_cast<const char*>(value), valuelen);
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cbs,
        [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* user) {
          static_cast<Client*>(user)->bodies[id].append(reinterpret_cast<const char*>(data), len);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cbs, [](nghttp2_session*, int32_t id, uint32_t, void* user) {
          static_cast<Client*>(user)->closed[id] = true;
          return 0;
        });
    nghttp2_session_client_new(&session, cbs, this);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~Client() { nghttp2_session_del(session); }

  int32_t Request(std::vector<std::pair<std::string, std::string>> fields,
                  const std::string* body = nullptr) {
    std::vector<nghttp2_nv> nva;
    for (auto& [n, v] : fields) {
      nva.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()),
                     n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider provider{};
    if (body != nullptr) {
      pending_body = *body;
      provider.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                                  uint32_t* flags, nghttp2_data_source*, void* user) -> ssize_t {
        auto* self = static_cast<Client*>(user);
        const size_t n = std::min(length, self->pending_body.size());
        std::copy_n(self->pending_body.data(), n, buf);
        self->pending_body.erase(0, n);
        if (self->pending_body.empty()) *flags |= NGHTTP2_DATA_FLAG_EOF;
        return static_cast<ssize_t>(n);
      };
    }
    return nghttp2_submit_request(session, nullptr, nva.data(), nva.size(),
                                  body != nullptr ? &provider : nullptr, nullptr);
  }

  // Opens a request whose body follows in parts (SendData).
  int32_t OpenUpload(std::vector<std::pair<std::string, std::string>> fields) {
    std::vector<nghttp2_nv> nva;
    for (auto& [n, v] : fields) {
      nva.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()),
                     n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    return nghttp2_submit_headers(session, NGHTTP2_FLAG_NONE, -1, nullptr, nva.data(), nva.size(),
                                  nullptr);
  }
  // Queues `bytes` of an upload's body once its HEADERS (or its last part) went out; `end` ends
  // the request.
  void SendData(int32_t id, const std::string& bytes, bool end) {
    parts[id] = bytes;
    nghttp2_data_provider provider{};
    provider.read_callback = [](nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                uint32_t* flags, nghttp2_data_source*, void* user) -> ssize_t {
      std::string& part = static_cast<Client*>(user)->parts[stream_id];
      const size_t n = std::min(length, part.size());
      std::copy_n(part.data(), n, buf);
      part.erase(0, n);
      if (part.empty()) *flags |= NGHTTP2_DATA_FLAG_EOF;
      return static_cast<ssize_t>(n);
    };
    nghttp2_submit_data(session, end ? NGHTTP2_FLAG_END_STREAM : NGHTTP2_FLAG_NONE, id, &provider);
  }

  nghttp2_session* session = nullptr;
  std::map<int32_t, std::string> parts;
  std::string pending_body;
  std::map<int32_t, std::map<std::string, std::string>> headers;
  std::map<int32_t, std::string> bodies;
  std::map<int32_t, bool> closed;
};

class H2SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    H2Limits limits;
    limits.max_body_bytes = 100;
    limits.max_header_bytes = 1024;
    limits.max_url_bytes = 64;
    limits.max_connection_body_bytes = 150;
    H2Session::Callbacks callbacks;
    callbacks.on_request = [this](H2Request r) { requests.push_back(std::move(r)); };
    callbacks.on_stream_closed = [this](int32_t id) { closed.push_back(id); };
    server = std::make_unique<H2Session>(limits, std::move(callbacks));
  }

  // Moves bytes both ways until neither side has more to send.
  void Pump() {
    for (int round = 0; round < 100; ++round) {
      bool moved = false;
      const uint8_t* data = nullptr;
      for (ssize_t n; (n = nghttp2_session_mem_send(client.session, &data)) > 0;) {
        ASSERT_TRUE(server->Receive({reinterpret_cast<const char*>(data), size_t(n)}));
        moved = true;
      }
      std::string out;
      server->Collect(&out);
      if (!out.empty()) {
        ASSERT_EQ(nghttp2_session_mem_recv(
                      client.session, reinterpret_cast<const uint8_t*>(out.data()), out.size()),
                  static_cast<ssize_t>(out.size()));
        moved = true;
      }
      if (!moved) return;
    }
  }

  static std::vector<std::pair<std::string, std::string>> Get(const std::string& path) {
    return {{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}};
  }

  Client client;
  std::unique_ptr<H2Session> server;
  std::vector<H2Request> requests;
  std::vector<int32_t> closed;
};

TEST_F(H2SessionTest, ReportsARequestAndSendsItsAnswer) {
  auto fields = Get("/v1/stream/a?offset=-1");
  fields.emplace_back("accept-encoding", "gzip");
  fields.emplace_back("x-twice", "1");
  fields.emplace_back("x-twice", "2");
  const int32_t id = client.Request(fields);
  Pump();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].stream_id, id);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].target, "/v1/stream/a?offset=-1");
  EXPECT_EQ(requests[0].authority, "x");
  EXPECT_EQ(requests[0].headers["accept-encoding"], "gzip");
  EXPECT_EQ(requests[0].headers["x-twice"], "1, 2");
  EXPECT_EQ(requests[0].refuse_status, 0);
  ASSERT_TRUE(server->Respond(id, 200, {{"Content-Type", "text/plain"}, {"Connection", "close"}},
                              "hello", false));
  Pump();
  EXPECT_EQ(client.headers[id][":status"], "200");
  EXPECT_EQ(client.headers[id]["content-type"], "text/plain");
  EXPECT_EQ(client.headers[id].count("connection"), 0u);
  EXPECT_EQ(client.bodies[id], "hello");
  EXPECT_TRUE(client.closed[id]);
  EXPECT_EQ(closed, std::vector<int32_t>{id});
  EXPECT_EQ(server->OpenStreams(), 0u);
}

TEST_F(H2SessionTest, StreamsAnAnswerAsItIsAppended) {
  const int32_t id = client.Request(Get("/live"));
  Pump();
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_TRUE(server->Respond(id, 200, {}, "", true));
  Pump();
  EXPECT_EQ(client.headers[id][":status"], "200");
  EXPECT_FALSE(client.closed[id]);
  EXPECT_TRUE(server->Append(id, "one "));
  Pump();
  EXPECT_EQ(client.bodies[id], "one ");
  EXPECT_TRUE(server->Append(id, "two"));
  server->End(id);
  Pump();
  EXPECT_EQ(client.bodies[id], "one two");
  EXPECT_TRUE(client.closed[id]);
  EXPECT_FALSE(server->Append(id, "late"));
}

TEST_F(H2SessionTest, QueuedTotalCountsEveryStreamsAnswerUntilItLeavesOrTheStreamCloses) {
  const int32_t a = client.Request(Get("/a"));
  const int32_t b = client.Request(Get("/b"));
  const int32_t c = client.Request(Get("/c"));
  Pump();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(server->QueuedTotal(), 0u);
  ASSERT_TRUE(server->Respond(a, 200, {}, std::string(200000, 'a'), false));
  ASSERT_TRUE(server->Respond(b, 200, {}, "", true));
  ASSERT_TRUE(server->Append(b, std::string(1000, 'b')));
  ASSERT_TRUE(server->Respond(c, 200, {}, std::string(300000, 'c'), false));
  EXPECT_EQ(server->QueuedTotal(), 501000u);
  EXPECT_EQ(server->Queued(a) + server->Queued(b) + server->Queued(c), 501000u);
  // The client resets c before any of it left: its queue is dropped with the stream.
  nghttp2_submit_rst_stream(client.session, NGHTTP2_FLAG_NONE, c, NGHTTP2_CANCEL);
  Pump();
  EXPECT_EQ(client.bodies[a].size(), 200000u);
  EXPECT_EQ(client.bodies[b].size(), 1000u);
  EXPECT_LT(client.bodies[c].size(), 300000u);
  EXPECT_FALSE(server->Open(c));
  EXPECT_EQ(server->QueuedTotal(), 0u);
  ASSERT_TRUE(server->Append(b, "more"));
  EXPECT_EQ(server->QueuedTotal(), 4u);
  server->End(b);
  Pump();
  EXPECT_EQ(server->QueuedTotal(), 0u);
  EXPECT_EQ(server->OpenStreams(), 0u);
}

TEST_F(H2SessionTest, BodiesReceivedAtOnceOnAConnectionStayWithinItsLimit) {
  auto post = [](const std::string& path) {
    return std::vector<std::pair<std::string, std::string>>{
        {":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}};
  };
  const int32_t a = client.OpenUpload(post("/a"));
  const int32_t b = client.OpenUpload(post("/b"));
  Pump();  // the HEADERS leave before any DATA may be submitted
  client.SendData(a, std::string(80, 'a'), false);
  Pump();
  EXPECT_TRUE(requests.empty());  // a's body is still coming
  // 80 bytes of b with a's 80 pass the connection's 150: b is refused, a goes on.
  client.SendData(b, std::string(80, 'b'), false);
  Pump();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].stream_id, b);
  EXPECT_EQ(requests[0].refuse_status, 503);
  EXPECT_TRUE(requests[0].body.empty());
  client.SendData(a, std::string(10, 'a'), true);
  Pump();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].stream_id, a);
  EXPECT_EQ(requests[1].refuse_status, 0);
  EXPECT_EQ(requests[1].body, std::string(90, 'a'));
  // a was handed over: a new body of 90 fits again.
  const int32_t c = client.OpenUpload(post("/c"));
  Pump();
  client.SendData(c, std::string(90, 'c'), true);
  Pump();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[2].refuse_status, 0);
  EXPECT_EQ(requests[2].body.size(), 90u);
}

TEST_F(H2SessionTest, AClientResetClosesTheStream) {
  const int32_t id = client.Request(Get("/live"));
  Pump();
  ASSERT_TRUE(server->Respond(id, 200, {}, "", true));
  Pump();
  EXPECT_TRUE(server->Open(id));
  nghttp2_submit_rst_stream(client.session, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  Pump();
  EXPECT_FALSE(server->Open(id));
  EXPECT_EQ(closed, std::vector<int32_t>{id});
  EXPECT_FALSE(server->Append(id, "gone"));
}

TEST_F(H2SessionTest, LimitsRefuseWithTheirStatus) {
  // One request with a body at a time: the client sends them from one buffer.
  const std::string big(150, 'b');
  const int32_t body_id = client.Request(
      {{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/p"}}, &big);
  Pump();
  const std::string small = "fits";
  const int32_t ok_id = client.Request(
      {{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/p"}}, &small);
  Pump();
  const int32_t url_id = client.Request(Get("/" + std::string(100, 'u')));
  auto fields = Get("/h");
  fields.emplace_back("x-filler", std::string(1100, 'h'));
  const int32_t header_id = client.Request(fields);
  Pump();
  std::map<int32_t, H2Request> by_id;
  for (auto& r : requests) by_id[r.stream_id] = r;
  ASSERT_EQ(by_id.size(), 4u);
  EXPECT_EQ(by_id[body_id].refuse_status, 413);
  EXPECT_TRUE(by_id[body_id].body.empty());
  EXPECT_EQ(by_id[url_id].refuse_status, 414);
  EXPECT_EQ(by_id[header_id].refuse_status, 431);
  EXPECT_EQ(by_id[ok_id].refuse_status, 0);
  EXPECT_EQ(by_id[ok_id].body, "fits");
}

TEST_F(H2SessionTest, ABrokenPrefaceFailsTheSession) {
  EXPECT_FALSE(server->Receive("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_FALSE(server->Alive());
}

}  // namespace
}  // namespace runnel::server
