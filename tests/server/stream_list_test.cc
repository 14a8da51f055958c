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
