// SSE fan-out: readers of one stream share one read and one framed data event per position
// (StreamService::ReadSse), and each still gets every record once, in order, with a control
// event after every data event (PROTOCOL.md 10.2); a reader that stops reading holds back no
// one else.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"
#include "server/offset_token.h"
#include "server/stream_service.h"
#include "support/loopback_socket.h"
#include "support/write_sync.h"

namespace runnel::server {
namespace {

// --- StreamService level ---------------------------------------------------------------------

class SseShareTest : public ::testing::Test {
 protected:
  explicit SseShareTest(size_t shared_bytes = StreamServiceOptions{}.sse_shared_frame_bytes)
      : service_(StreamRegistry(), Options(shared_bytes), &metrics_) {}

  static StreamServiceOptions Options(size_t shared_bytes) {
    StreamServiceOptions options;
    options.sse_shared_frame_bytes = shared_bytes;
    return options;
  }

  int Write(const std::string& method, const std::string& body,
            std::map<std::string, std::string> headers = {}) {
    HttpRequest request;
    request.method = method;
    request.path = "/v1/stream/s";
    request.headers.insert(headers.begin(), headers.end());
    request.headers.emplace("content-type", content_type_);
    request.body = body;
    return testing::WriteSync(service_, std::move(request)).status;
  }

  ReadState BeginSse(const std::string& offset) {
    HttpRequest request;
    request.method = "GET";
    request.path = "/v1/stream/s";
    request.query = {{"offset", offset}, {"live", "sse"}};
    HttpResponse error;
    auto state = service_.BeginRead(ParseRoute(request.path), request, &error);
    EXPECT_TRUE(state.has_value()) << error.body;
    return state.value_or(ReadState{});
  }

  static nlohmann::json ControlOf(const std::string& block) {
    const std::string prefix = "event: control\ndata:";
    EXPECT_EQ(block.substr(0, prefix.size()), prefix);
    EXPECT_EQ(block.substr(block.size() - 2), "\n\n");
    return nlohmann::json::parse(block.substr(prefix.size(), block.size() - prefix.size() - 2));
  }

  std::string content_type_ = "text/plain";
  Metrics metrics_;
  StreamService service_;
};

TEST_F(SseShareTest, ReadersAtOnePositionShareOneFramedDataEvent) {
  ASSERT_EQ(Write("PUT", ""), 201);
  ReadState a = BeginSse("now");
  ReadState b = BeginSse("now");
  SseStep idle = service_.ReadSse(a);
  EXPECT_FALSE(idle.gone);
  EXPECT_EQ(idle.data, nullptr);
  EXPECT_TRUE(idle.up_to_date);

  ASSERT_EQ(Write("POST", "hello\nworld"), 204);
  SseStep first = service_.ReadSse(a);
  SseStep second = service_.ReadSse(b);
  ASSERT_NE(first.data, nullptr);
  EXPECT_EQ(first.data.get(), second.data.get()) << "the second reader re-read and re-framed";
  EXPECT_EQ(*first.data, "event: data\ndata:hello\ndata:world\n\n");
  EXPECT_EQ(first.start, 0u);
  EXPECT_EQ(first.next, 1u);
  EXPECT_EQ(second.next, 1u);
  EXPECT_TRUE(first.up_to_date);
  EXPECT_FALSE(first.closed);
}

TEST_F(SseShareTest, ASharedFrameNeverHidesLaterRecordsOrTheClose) {
  ASSERT_EQ(Write("PUT", ""), 201);
  ReadState lead = BeginSse("now");
  ReadState lag = BeginSse("now");
  ASSERT_EQ(Write("POST", "a"), 204);
  SseStep one = service_.ReadSse(lead);  // frames [0, 1) for everyone at 0
  ASSERT_NE(one.data, nullptr);
  ASSERT_EQ(Write("POST", "b"), 204);
  // The frame at 0 is still shared, but the tail moved: not up to date any more.
  SseStep stale = service_.ReadSse(lag);
  EXPECT_EQ(stale.data.get(), one.data.get());
  EXPECT_EQ(stale.next, 1u);
  EXPECT_FALSE(stale.up_to_date);
  lag.position = stale.next;
  SseStep rest = service_.ReadSse(lag);
  ASSERT_NE(rest.data, nullptr);
  EXPECT_EQ(*rest.data, "event: data\ndata:b\n\n");
  EXPECT_TRUE(rest.up_to_date);

  // Closing: a reader at the tail learns it from the control event, without a data event.
  ASSERT_EQ(Write("POST", "", {{"stream-closed", "true"}}), 204);
  lag.position = rest.next;
  SseStep closed = service_.ReadSse(lag);
  EXPECT_EQ(closed.data, nullptr);
  EXPECT_TRUE(closed.closed);
  auto control = ControlOf(service_.SseControl(lag, closed));
  EXPECT_EQ(control["streamNextOffset"], FormatOffset(2));
  EXPECT_EQ(control["streamClosed"], true);
  EXPECT_EQ(control["upToDate"], true);
  EXPECT_FALSE(control.contains("streamCursor")) << control.dump();
}

TEST_F(SseShareTest, ControlEventCarriesCursorAndOffsetWhileOpen) {
  ASSERT_EQ(Write("PUT", ""), 201);
  ASSERT_EQ(Write("POST", "x"), 204);
  ASSERT_EQ(Write("POST", "y"), 204);
  ReadState reader = BeginSse("-1");
  SseStep step = service_.ReadSse(reader);
  ASSERT_NE(step.data, nullptr);
  EXPECT_EQ(*step.data, "event: data\ndata:xy\n\n");
  auto control = ControlOf(service_.SseControl(reader, step));
  EXPECT_EQ(control["streamNextOffset"], FormatOffset(2));
  EXPECT_TRUE(control["streamCursor"].is_string());
  EXPECT_EQ(control["upToDate"], true);
  EXPECT_FALSE(control.contains("streamClosed"));
  // The same object the JSON library would print (V-rules compare values, not layout).
  nlohmann::json expected = {{"streamNextOffset", FormatOffset(2)},
                             {"streamCursor", control["streamCursor"]},
                             {"upToDate", true}};
  EXPECT_EQ(control, expected);
}

TEST_F(SseShareTest, BinaryStreamsShareBase64Frames) {
  content_type_ = "application/octet-stream";
  ASSERT_EQ(Write("PUT", ""), 201);
  ReadState a = BeginSse("now");
  ReadState b = BeginSse("now");
  ASSERT_TRUE(a.base64);
  ASSERT_EQ(Write("POST", std::string("\x00\x01\r\n", 4)), 204);
  SseStep first = service_.ReadSse(a);
  SseStep second = service_.ReadSse(b);
  ASSERT_NE(first.data, nullptr);
  EXPECT_EQ(first.data.get(), second.data.get());
  EXPECT_EQ(*first.data, "event: data\ndata:AAENCg==\n\n");
}

TEST_F(SseShareTest, NothingLeftBelowTheTailWaitsInsteadOfSpinning) {
  ASSERT_EQ(Write("PUT", ""), 201);
  ASSERT_EQ(Write("POST", "a"), 204);
  ASSERT_EQ(Write("POST", "b"), 204);
  ReadState reader = BeginSse("-1");
  // Retention removes every record under the reader: nothing to send, and the SSE loop must
  // wait for a hint rather than read the same nothing again without yielding.
  auto trimmed = service_.registry().store().TruncatePrefix(reader.id, 2, false);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  SseStep step = service_.ReadSse(reader);
  EXPECT_FALSE(step.gone);
  EXPECT_EQ(step.data, nullptr);
  EXPECT_TRUE(step.up_to_date);
  EXPECT_FALSE(step.closed);
  // A new record is read from where the log now starts.
  ASSERT_EQ(Write("POST", "c"), 204);
  step = service_.ReadSse(reader);
  ASSERT_NE(step.data, nullptr);
  EXPECT_EQ(*step.data, "event: data\ndata:c\n\n");
  EXPECT_EQ(step.next, 3u);
  EXPECT_TRUE(step.up_to_date);
}

class SseUnsharedTest : public SseShareTest {
 protected:
  SseUnsharedTest() : SseShareTest(0) {}
};

TEST_F(SseUnsharedTest, SharingOffReadsForEachReaderWithTheSameResult) {
  ASSERT_EQ(Write("PUT", ""), 201);
  ReadState a = BeginSse("now");
  ReadState b = BeginSse("now");
  ASSERT_EQ(Write("POST", "hello"), 204);
  SseStep first = service_.ReadSse(a);
  SseStep second = service_.ReadSse(b);
  ASSERT_NE(first.data, nullptr);
  ASSERT_NE(second.data, nullptr);
  EXPECT_NE(first.data.get(), second.data.get());
  EXPECT_EQ(*first.data, *second.data);
}

class SseTinyShareTest : public SseShareTest {
 protected:
  SseTinyShareTest() : SseShareTest(64) {}
};

TEST_F(SseTinyShareTest, FramesAboveTheBoundAreDeliveredButNotKept) {
  ASSERT_EQ(Write("PUT", ""), 201);
  ReadState a = BeginSse("now");
  ReadState b = BeginSse("now");
  const std::string big(200, 'z');
  ASSERT_EQ(Write("POST", big), 204);
  SseStep first = service_.ReadSse(a);
  SseStep second = service_.ReadSse(b);
  ASSERT_NE(first.data, nullptr);
  ASSERT_NE(second.data, nullptr);
  EXPECT_NE(first.data.get(), second.data.get()) << "a frame above the bound was kept";
  EXPECT_EQ(*first.data, "event: data\ndata:" + big + "\n\n");
  EXPECT_EQ(*second.data, *first.data);
}

// --- over HTTP -------------------------------------------------------------------------------

// One blocking loopback connection reading a chunked SSE response.
class SseClient {
 public:
  SseClient(uint16_t port, int receive_buffer = 0)
      : fd_(testing::ConnectLoopback(port, 15, receive_buffer)), connected_(fd_ >= 0) {}
  ~SseClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool Send(const std::string& data) { return testing::SendAll(fd_, data); }

  // A plain request/response with a Content-Length body (or none); returns the status.
  int Request(const std::string& data) {
    if (!Send(data)) return 0;
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return 0;
    }
    std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    std::string lower = head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t length = 0;
    if (size_t cl = lower.find("content-length:"); cl != std::string::npos) {
      length = std::stoul(lower.substr(cl + 15));
    }
    while (buffer_.size() < length) {
      if (!Fill()) return 0;
    }
    buffer_.erase(0, length);
    return std::stoi(head.substr(9, 3));
  }

  // Reads the SSE response to its end (the last chunk); the decoded event text, or "" with
  // `error` set.
  std::string ReadSseToEnd(std::string* error) {
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return *error = "no response head", "";
    }
    if (buffer_.substr(0, 12) != "HTTP/1.1 200") return *error = buffer_.substr(0, end), "";
    buffer_.erase(0, end + 4);
    std::string text;
    for (;;) {
      size_t line;
      while ((line = buffer_.find("\r\n")) == std::string::npos) {
        if (!Fill()) return *error = "response ended without its last chunk", "";
      }
      const size_t size = std::stoul(buffer_.substr(0, line), nullptr, 16);
      while (buffer_.size() < line + 2 + size + 2) {
        if (!Fill()) return *error = "truncated chunk", "";
      }
      text += buffer_.substr(line + 2, size);
      buffer_.erase(0, line + 2 + size + 2);
      if (size == 0) return text;
    }
  }

 private:
  bool Fill() {
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

struct SseEvent {
  std::string type;
  std::string data;
};

std::vector<SseEvent> ParseEvents(const std::string& text) {
  std::vector<SseEvent> events;
  size_t at = 0;
  size_t end;
  while ((end = text.find("\n\n", at)) != std::string::npos) {
    SseEvent event;
    std::string block = text.substr(at, end - at);
    at = end + 2;
    size_t pos = 0;
    while (pos <= block.size()) {
      size_t nl = block.find('\n', pos);
      std::string line = block.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      if (line.rfind("event: ", 0) == 0) event.type = line.substr(7);
      if (line.rfind("data:", 0) == 0) {
        if (!event.data.empty()) event.data += '\n';
        event.data += line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
      }
      if (nl == std::string::npos) break;
      pos = nl + 1;
    }
    events.push_back(std::move(event));
  }
  return events;
}

class SseFanoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    auto server = HttpServer::Start(StreamRegistry(), options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    server_->Stop();
    thread_.join();
  }

  static std::string Request(const std::string& method, const std::string& body,
                             const std::string& extra = "") {
    return method + " /v1/stream/fan HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n" + extra +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  static std::string SseGet() {
    return "GET /v1/stream/fan?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n\r\n";
  }

  // Checks one reader's whole response: the records' bytes in order, each data event followed
  // by a control event, the last control event closed at `final_position`.
  static void ExpectComplete(const std::string& text, const std::string& expected,
                             uint64_t final_position) {
    std::vector<SseEvent> events = ParseEvents(text);
    ASSERT_FALSE(events.empty());
    std::string data;
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].type == "data") {
        data += events[i].data;
        ASSERT_LT(i + 1, events.size());
        EXPECT_EQ(events[i + 1].type, "control") << "event " << i + 1;
      } else {
        ASSERT_EQ(events[i].type, "control");
      }
    }
    EXPECT_EQ(data, expected);
    auto last = nlohmann::json::parse(events.back().data);
    EXPECT_EQ(last["streamNextOffset"], FormatOffset(final_position));
    EXPECT_EQ(last["streamClosed"], true);
  }

  uint16_t port() const { return server_->port(); }
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

TEST_F(SseFanoutTest, ManyReadersEachGetEveryRecordOnceInOrder) {
  SseClient writer(port());
  ASSERT_EQ(writer.Request(Request("PUT", "")), 201);
  constexpr int kReaders = 40;
  constexpr int kAppends = 30;
  std::vector<std::unique_ptr<SseClient>> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.push_back(std::make_unique<SseClient>(port()));
    ASSERT_TRUE(readers.back()->connected());
    ASSERT_TRUE(readers.back()->Send(SseGet()));
  }
  std::string expected;
  for (int i = 0; i < kAppends; ++i) {
    std::string body = "m" + std::to_string(i) + ";";
    expected += body;
    ASSERT_EQ(writer.Request(Request("POST", body)), 204);
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(writer.Request(Request("POST", "", "Stream-Closed: true\r\n")), 204);
  for (int i = 0; i < kReaders; ++i) {
    std::string error;
    std::string text = readers[i]->ReadSseToEnd(&error);
    ASSERT_TRUE(error.empty()) << "reader " << i << ": " << error;
    SCOPED_TRACE("reader " + std::to_string(i));
    ExpectComplete(text, expected, kAppends);
  }
}

TEST_F(SseFanoutTest, AReaderThatStopsReadingHoldsBackNoOneElse) {
  SseClient writer(port());
  ASSERT_EQ(writer.Request(Request("PUT", "")), 201);
  // The slow reader's small receive buffer fills long before the appends end.
  SseClient slow(port(), /*receive_buffer=*/4096);
  ASSERT_TRUE(slow.Send(SseGet()));
  std::vector<std::unique_ptr<SseClient>> readers;
  for (int i = 0; i < 4; ++i) {
    readers.push_back(std::make_unique<SseClient>(port()));
    ASSERT_TRUE(readers.back()->Send(SseGet()));
  }
  std::string expected;
  constexpr int kAppends = 800;  // 6.4 MB: more than the server's socket send buffer
  const std::string filler(8000, 'f');
  std::vector<std::thread> threads;
  std::vector<std::string> texts(readers.size());
  std::vector<std::string> errors(readers.size());
  for (size_t i = 0; i < readers.size(); ++i) {
    threads.emplace_back([&, i] { texts[i] = readers[i]->ReadSseToEnd(&errors[i]); });
  }
  for (int i = 0; i < kAppends; ++i) {
    std::string body = std::to_string(i) + filler + ";";
    expected += body;
    ASSERT_EQ(writer.Request(Request("POST", body)), 204);
  }
  ASSERT_EQ(writer.Request(Request("POST", "", "Stream-Closed: true\r\n")), 204);
  // The others finish while the slow reader has read nothing.
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < readers.size(); ++i) {
    ASSERT_TRUE(errors[i].empty()) << "reader " << i << ": " << errors[i];
    SCOPED_TRACE("reader " + std::to_string(i));
    ExpectComplete(texts[i], expected, kAppends);
  }
  // The slow reader then gets everything too.
  std::string error;
  std::string text = slow.ReadSseToEnd(&error);
  ASSERT_TRUE(error.empty()) << error;
  ExpectComplete(text, expected, kAppends);
}

// Parked readers get each event written in place by their io thread, framed once per position
// and cursor: readers of one stream that sent different cursors still get their own control
// events (a client cursor at or past the server's is answered with a larger one).
TEST_F(SseFanoutTest, ReadersWithDifferentCursorsGetTheirOwnControlEvents) {
  SseClient writer(port());
  ASSERT_EQ(writer.Request(Request("PUT", "")), 201);
  constexpr uint64_t kFarCursor = 900000000000;
  std::vector<std::unique_ptr<SseClient>> readers;
  for (int i = 0; i < 6; ++i) {
    readers.push_back(std::make_unique<SseClient>(port()));
    const std::string cursor = i % 2 == 1 ? "&cursor=" + std::to_string(kFarCursor) : "";
    ASSERT_TRUE(readers.back()->Send("GET /v1/stream/fan?offset=now&live=sse" + cursor +
                                     " HTTP/1.1\r\nHost: x\r\n\r\n"));
  }
  // Let every reader park at the tail before the appends.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string expected;
  for (int i = 0; i < 20; ++i) {
    std::string body = "e" + std::to_string(i) + ";";
    expected += body;
    ASSERT_EQ(writer.Request(Request("POST", body)), 204);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(writer.Request(Request("POST", "", "Stream-Closed: true\r\n")), 204);
  for (size_t i = 0; i < readers.size(); ++i) {
    SCOPED_TRACE("reader " + std::to_string(i));
    std::string error;
    const std::string text = readers[i]->ReadSseToEnd(&error);
    ASSERT_TRUE(error.empty()) << error;
    ExpectComplete(text, expected, 20);
    int checked = 0;
    for (const SseEvent& event : ParseEvents(text)) {
      if (event.type != "control") continue;
      auto control = nlohmann::json::parse(event.data);
      if (!control.contains("streamCursor")) continue;
      const uint64_t cursor = std::stoull(control["streamCursor"].get<std::string>());
      if (i % 2 == 1) {
        EXPECT_GT(cursor, kFarCursor);
      } else {
        EXPECT_LT(cursor, kFarCursor);
      }
      ++checked;
    }
    // Appends that land while a reader is busy share one data event, so count loosely.
    EXPECT_GE(checked, 1);
  }
}

}  // namespace
}  // namespace runnel::server
