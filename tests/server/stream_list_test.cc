// GET /v1/streams: the listing with prefix, after and limit (the `runnel ls` call).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/attributes.h"
#include "runnel/channel.h"
#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/http_types.h"
#include "server/stream_service.h"
#include "support/forwarding_store.h"
#include "support/protocol_differential.h"

namespace runnel::server {
namespace {

using json = nlohmann::json;
using testing::Serve;

// Counts the catalog entries the store hands out through ListStreams.
class CountingStore final : public testing::ForwardingStore {
 public:
  explicit CountingStore(size_t* listed) : listed_(listed) {}
  Result<std::vector<StreamInfo>> ListStreams(std::string_view ns, std::string_view start_after,
                                              size_t limit) override {
    auto page = ForwardingStore::ListStreams(ns, start_after, limit);
    if (page.ok()) *listed_ += page->size();
    return page;
  }

 private:
  size_t* listed_;
};

class StreamListTest : public ::testing::Test {
 protected:
  StreamListTest() : service_(StreamRegistry(MakeStore()), {}, nullptr) {}

  std::unique_ptr<Store> MakeStore() {
    auto store = std::make_unique<CountingStore>(&listed_);
    store_ = store.get();
    return store;
  }

  void Create(const std::string& name) {
    HttpRequest r;
    r.method = "PUT";
    r.path = "/v1/stream/" + name;
    r.headers["content-type"] = "text/plain";
    ASSERT_EQ(Serve(service_, r).status, 201) << name;
  }
  // The names of one listing page, and its next_after ("" when absent).
  std::vector<std::string> List(const std::string& query, std::string* next_after = nullptr) {
    HttpRequest r;
    r.method = "GET";
    r.path = "/v1/streams";
    EXPECT_TRUE(ParseQuery(query, &r.query)) << query;
    HttpResponse got = service_.HandleList(ParseRoute(r.path), r);
    EXPECT_EQ(got.status, 200) << got.body;
    auto body = json::parse(got.body, nullptr, false);
    std::vector<std::string> names;
    if (!body.is_object()) return names;
    for (const auto& s : body["streams"]) names.push_back(s["name"].get<std::string>());
    if (next_after != nullptr) *next_after = body.value("next_after", "");
    return names;
  }

  size_t listed_ = 0;
  // The store under service_, for streams made as another layer (a channel) makes them. Declared
  // before service_, whose construction sets it.
  Store* store_ = nullptr;
  StreamService service_;
};

TEST_F(StreamListTest, APrefixScansOnlyTheStreamsItMatches) {
  // 2,000 names sort before the prefix; a listing of "m" must not walk through them.
  for (int i = 0; i < 2000; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "a%04d", i);
    Create(name);
  }
  Create("m");
  Create("m-1");
  Create("m-2");
  Create("n");
  listed_ = 0;
  EXPECT_EQ(List("prefix=m"), (std::vector<std::string>{"m", "m-1", "m-2"}));
  // At most the names from the prefix on (a page of the store may run past the matches).
  EXPECT_LE(listed_, 4u);
  listed_ = 0;
  EXPECT_TRUE(List("prefix=l").empty());
  EXPECT_LE(listed_, 4u);
}

TEST_F(StreamListTest, PagesOfAPrefixAreContiguousAndStartAtTheExactName) {
  for (const char* name : {"a", "job", "job-1", "job-2", "job-3", "jobs", "jp"}) Create(name);
  std::string next;
  EXPECT_EQ(List("prefix=job&limit=2", &next), (std::vector<std::string>{"job", "job-1"}));
  EXPECT_EQ(next, "job-1");
  EXPECT_EQ(List("prefix=job&limit=2&after=" + next, &next),
            (std::vector<std::string>{"job-2", "job-3"}));
  EXPECT_EQ(next, "job-3");
  EXPECT_EQ(List("prefix=job&limit=2&after=" + next, &next), (std::vector<std::string>{"jobs"}));
  EXPECT_EQ(next, "");
  // `after` before the prefix starts at the prefix; without a prefix everything is listed.
  EXPECT_EQ(List("prefix=job-&after=a"), (std::vector<std::string>{"job-1", "job-2", "job-3"}));
  EXPECT_EQ(List("").size(), 7u);
  EXPECT_EQ(List("after=jobs"), (std::vector<std::string>{"jp"}));
}

TEST_F(StreamListTest, DeletedStreamsAreNotListedAndDoNotEndAPage) {
  for (const char* name : {"q", "q1", "q2", "q3"}) Create(name);
  HttpRequest del;
  del.method = "DELETE";
  del.path = "/v1/stream/q";
  ASSERT_EQ(Serve(service_, del).status, 204);
  del.path = "/v1/stream/q2";
  ASSERT_EQ(Serve(service_, del).status, 204);
  std::string next;
  EXPECT_EQ(List("prefix=q&limit=1", &next), (std::vector<std::string>{"q1"}));
  EXPECT_EQ(next, "q1");
  EXPECT_EQ(List("prefix=q&limit=1&after=q1", &next), (std::vector<std::string>{"q3"}));
  EXPECT_EQ(next, "");
}

// More than 2,000 streams in natural order: every page continues where the last one ended (a
// page boundary falls between "s-1000" and "s-1001"), and name order stays the default.
TEST_F(StreamListTest, NaturalOrderPagesThroughNumbersByValue) {
  constexpr int kStreams = 2100;
  for (int i = 1; i <= kStreams; ++i) Create("s-" + std::to_string(i));
  std::vector<std::string> all;
  std::string next;
  std::string query = "order=natural&prefix=s-";
  for (int pages = 0; pages < 10; ++pages) {
    auto page = List(query, &next);
    all.insert(all.end(), page.begin(), page.end());
    if (next.empty()) break;
    EXPECT_EQ(next, all.back());
    query = "order=natural&prefix=s-&after=" + next;
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(kStreams));
  for (int i = 1; i <= kStreams; ++i)
    ASSERT_EQ(all[static_cast<size_t>(i - 1)], "s-" + std::to_string(i));
  EXPECT_EQ(List("order=natural&prefix=s-&after=s-999&limit=3", &next),
            (std::vector<std::string>{"s-1000", "s-1001", "s-1002"}));
  EXPECT_EQ(next, "s-1002");
  // A prefix ending in a digit: "s-1" and then the numbers that continue it, by value.
  EXPECT_EQ(List("order=natural&prefix=s-1&limit=4"),
            (std::vector<std::string>{"s-1", "s-10", "s-11", "s-12"}));
  EXPECT_EQ(List("order=natural&prefix=s-2&after=s-299&limit=3"),
            (std::vector<std::string>{"s-2000", "s-2001", "s-2002"}));
  // Name order is the default and order=name says so.
  EXPECT_EQ(List("prefix=s-&limit=3"), (std::vector<std::string>{"s-1", "s-10", "s-100"}));
  EXPECT_EQ(List("order=name&prefix=s-&limit=3"),
            (std::vector<std::string>{"s-1", "s-10", "s-100"}));
}

TEST_F(StreamListTest, NaturalOrderSkipsHiddenStreamsAndRefusesOtherOrders) {
  for (const char* name : {"q-10", "q-9", "q-2", "q-1"}) Create(name);
  HttpRequest del;
  del.method = "DELETE";
  del.path = "/v1/stream/q-2";
  ASSERT_EQ(Serve(service_, del).status, 204);
  std::string next;
  EXPECT_EQ(List("order=natural&limit=2", &next), (std::vector<std::string>{"q-1", "q-9"}));
  EXPECT_EQ(next, "q-9");
  EXPECT_EQ(List("order=natural&limit=2&after=q-9", &next), (std::vector<std::string>{"q-10"}));
  EXPECT_EQ(next, "");
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/streams";
  ASSERT_TRUE(ParseQuery("order=size", &r.query));
  HttpResponse got = service_.HandleList(ParseRoute(r.path), r);
  EXPECT_EQ(got.status, 400);
  auto body = json::parse(got.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << got.body;
  EXPECT_EQ(body["error"]["code"], "invalid_argument");
  EXPECT_EQ(body["error"]["message"], "order must be 'name' or 'natural'");
}

TEST_F(StreamListTest, AChannelsStreamsAreMarkedAndOthersAreNot) {
  Create("orders");
  StreamSpec spec;
  spec.ns = StreamScope::Global().Label();
  spec.name = "orders:0";
  spec.content_type = "application/octet-stream";
  auto tagged = attributes::Set("", DurableChannel::kAttributeKey, R"({"partition":0})");
  ASSERT_TRUE(tagged.ok());
  spec.attributes = *tagged;
  ASSERT_TRUE(store_->CreateStream(spec).ok());
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/streams";
  auto body = json::parse(service_.HandleList(ParseRoute(r.path), r).body);
  ASSERT_EQ(body["streams"].size(), 2u);
  EXPECT_EQ(body["streams"][0]["name"], "orders");
  EXPECT_FALSE(body["streams"][0].contains("channel"));
  EXPECT_EQ(body["streams"][1]["name"], "orders:0");
  EXPECT_EQ(body["streams"][1]["channel"], true);
}

}  // namespace
}  // namespace runnel::server
