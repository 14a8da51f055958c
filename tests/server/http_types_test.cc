#include "server/http_types.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics.h"

namespace runnel::server {
namespace {

TEST(RouteTest, GlobalStreams) {
  Route r = ParseRoute("/v1/stream/orders/2024");
  EXPECT_EQ(r.kind, Route::Kind::kStream);
  EXPECT_TRUE(r.scope.is_global());
  EXPECT_EQ(r.name, "orders/2024");
}

TEST(RouteTest, FixedRoutesAndMisses) {
  EXPECT_EQ(ParseRoute("/healthz").kind, Route::Kind::kHealth);
  EXPECT_EQ(ParseRoute("/metrics").kind, Route::Kind::kMetrics);
  EXPECT_EQ(ParseRoute("/v1/stream/").kind, Route::Kind::kNotFound);
  EXPECT_EQ(ParseRoute("/v1/streams/x").kind, Route::Kind::kNotFound);
  EXPECT_EQ(ParseRoute("").kind, Route::Kind::kNotFound);
  // The dashboard (dashboard.h): the page and its files.
  EXPECT_EQ(ParseRoute("/").kind, Route::Kind::kDashboard);
  EXPECT_EQ(ParseRoute("/ui/app.js").kind, Route::Kind::kDashboard);
  EXPECT_EQ(ParseRoute("/ui").kind, Route::Kind::kNotFound);
  EXPECT_EQ(ParseRoute("/uix/app.js").kind, Route::Kind::kNotFound);
}

TEST(RouteTest, TenantStreamsOnlyWhenEnabled) {
  EXPECT_EQ(ParseRoute("/v1/tenants/acme/stream/orders").kind, Route::Kind::kNotFound);
  Route r = ParseRoute("/v1/tenants/acme/stream/orders", /*allow_tenants=*/true);
  EXPECT_EQ(r.kind, Route::Kind::kStream);
  EXPECT_EQ(r.scope, StreamScope::Tenant("acme"));
  EXPECT_EQ(r.name, "orders");
  EXPECT_EQ(ParseRoute("/v1/tenants//stream/x", true).kind, Route::Kind::kNotFound);
  EXPECT_EQ(ParseRoute("/v1/tenants/acme/stream/", true).kind, Route::Kind::kNotFound);
}

TEST(PercentDecodeTest, DecodesAndRejectsBadEscapes) {
  EXPECT_EQ(*PercentDecode("a%2Fb%20c", false), "a/b c");
  EXPECT_EQ(*PercentDecode("a+b", true), "a b");
  EXPECT_EQ(*PercentDecode("a+b", false), "a+b");
  EXPECT_EQ(*PercentDecode("/v1/stream/plain-name", true), "/v1/stream/plain-name");
  EXPECT_EQ(*PercentDecode("", false), "");
  EXPECT_FALSE(PercentDecode("%", false));
  EXPECT_FALSE(PercentDecode("%4", false));
  EXPECT_FALSE(PercentDecode("%zz", false));
}

TEST(ParseQueryTest, FirstOccurrenceWins) {
  FieldList q;
  ASSERT_TRUE(ParseQuery("offset=-1&live=sse&offset=now&flag", &q));
  EXPECT_EQ(q["offset"], "-1");
  EXPECT_EQ(q["live"], "sse");
  EXPECT_EQ(q["flag"], "");
  FieldList bad;
  EXPECT_FALSE(ParseQuery("offset=%G1", &bad));
}

TEST(ParseQueryTest, FirstOccurrenceWinsAmongManyParameters) {
  // Past FieldList::kMergeLinear parameters the merge sorts; the first value must still win.
  std::string query = "z=first";
  for (int i = 0; i < 40; ++i) query += "&p" + std::to_string(i % 20) + "=" + std::to_string(i);
  query += "&z=last";
  FieldList q;
  ASSERT_TRUE(ParseQuery(query, &q));
  EXPECT_EQ(q.size(), 21u);
  EXPECT_EQ(q["z"], "first");
  EXPECT_EQ(q["p3"], "3");
  EXPECT_EQ(q["p19"], "19");
}

TEST(FieldListTest, MapLikeOperations) {
  FieldList f{{"a", "1"}, {"b", "2"}, {"a", "ignored"}};
  EXPECT_EQ(f.size(), 2u);
  EXPECT_EQ(f.find("a")->second, "1");
  EXPECT_EQ(f.find("c"), f.end());
  auto [it, inserted] = f.emplace("b", "3");
  EXPECT_FALSE(inserted);
  EXPECT_EQ(it->second, "2");
  f["c"] = "4";
  EXPECT_EQ(f.count("c"), 1u);
  EXPECT_EQ(f.erase("a"), 1u);
  EXPECT_EQ(f.erase("a"), 0u);
  EXPECT_EQ(f.count("a"), 0u);
  std::vector<std::string> names;
  for (const auto& [name, value] : f) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"b", "c"}));
}

TEST(FieldListTest, RepeatedHeadersAreJoinedInOrder) {
  for (int extra : {0, 30}) {  // the linear merge, and the sorted one past kMergeLinear
    FieldList f;
    f.Append("x-twice", "1");
    for (int i = 0; i < extra; ++i) f.Append("x-" + std::to_string(i), "v");
    f.Append("accept", "a");
    f.Append("x-twice", "2");
    f.Append("x-twice", "3");
    f.MergeRepeated(/*join=*/true);
    EXPECT_EQ(f.size(), 2u + extra);
    EXPECT_EQ(f.find("x-twice")->second, "1, 2, 3");
    EXPECT_EQ(f.find("accept")->second, "a");
    HttpRequest request;
    request.headers = f;
    EXPECT_EQ(request.Header("x-twice"), "1, 2, 3");
    EXPECT_FALSE(request.Header("X-Twice").has_value());
  }
}

}  // namespace
}  // namespace runnel::server

namespace runnel::server {
namespace {

TEST(OriginFormTest, AbsoluteTargetsGiveTheirPathAndAuthority) {
  std::string_view authority;
  EXPECT_EQ(OriginFormOf("http://h:4437/v1/stream/a?offset=-1", &authority),
            "/v1/stream/a?offset=-1");
  EXPECT_EQ(authority, "h:4437");
  EXPECT_EQ(OriginFormOf("HTTPS://example.org", &authority), "/");
  EXPECT_EQ(authority, "example.org");
  EXPECT_EQ(OriginFormOf("http://h?x=1", &authority), "/?x=1");
  EXPECT_EQ(authority, "h");
  EXPECT_EQ(OriginFormOf("/v1/stream/http://x", &authority), std::nullopt);
  EXPECT_EQ(OriginFormOf("ftp://h/x", &authority), std::nullopt);
  EXPECT_EQ(OriginFormOf("*", &authority), std::nullopt);
}

TEST(ChannelRouteTest, ChannelPathsKeysAndPartitions) {
  Route c = ParseRoute("/v1/channels/orders");
  EXPECT_EQ(c.kind, Route::Kind::kChannel);
  EXPECT_EQ(c.name, "orders");
  EXPECT_FALSE(c.channel_key.has_value());
  EXPECT_FALSE(c.channel_partition.has_value());
  Route k = ParseRoute("/v1/channels/orders/keys/a/b c");
  EXPECT_EQ(k.kind, Route::Kind::kChannel);
  EXPECT_EQ(k.channel_key, "a/b c");
  Route p = ParseRoute("/v1/channels/orders/partitions/3");
  EXPECT_EQ(p.channel_partition, "3");
  EXPECT_EQ(ParseRoute("/v1/channels/").kind, Route::Kind::kNotFound);
  EXPECT_EQ(ParseRoute("/v1/channels/orders/keys/").kind, Route::Kind::kNotFound);
  EXPECT_EQ(ParseRoute("/v1/channels/orders/other").kind, Route::Kind::kNotFound);
}

// The store's group-commit figures in the Prometheus text: cumulative buckets, a +Inf bucket
// equal to the count, and nothing at all for a store that does not report them.
// Requests counted from several threads, interleaving labels (each thread's last-counter
// cache misses and hits), and from two instances in one thread, all land on their own counter.
TEST(MetricsTest, CountsRequestsFromManyThreadsPerLabelAndInstance) {
  Metrics metrics;
  Metrics other;
  constexpr int kThreads = 4;
  constexpr int kEach = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        metrics.CountRequest("stream", "POST", 204);
        if (i % 10 == 0) metrics.CountRequest("stream", "POST", 409);
        if (i % 100 == 0) other.CountRequest("stream", "POST", 204);
        metrics.CountRequest("stream", "GET", 200);
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("{route=\"stream\",method=\"POST\",status=\"204\"} 4000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("{route=\"stream\",method=\"POST\",status=\"409\"} 400\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("{route=\"stream\",method=\"GET\",status=\"200\"} 4000\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("runnel_http_requests_by_version_total{version=\"1.1\"} 8400\n"),
            std::string::npos)
      << text;
  EXPECT_NE(other.Render().find("{route=\"stream\",method=\"POST\",status=\"204\"} 40\n"),
            std::string::npos);
}

TEST(MetricsTest, AppendLatencyHistogramIsCumulative) {
  Metrics metrics;
  metrics.ObserveAppendLatency(50);       // the first bucket, on its bound
  metrics.ObserveAppendLatency(51);       // the second
  metrics.ObserveAppendLatency(900);      // 1 ms
  metrics.ObserveAppendLatency(2000000);  // above the last bound
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("runnel_append_latency_seconds_bucket{le=\"5e-05\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("runnel_append_latency_seconds_bucket{le=\"0.0001\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("runnel_append_latency_seconds_bucket{le=\"0.001\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("runnel_append_latency_seconds_bucket{le=\"1\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("runnel_append_latency_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("runnel_append_latency_seconds_count 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_append_latency_seconds_sum 2.001001\n"), std::string::npos) << text;
}

// The exposition format of the whole /metrics text: each family has one HELP line, then its
// TYPE line, then its samples (a histogram's named _bucket, _sum and _count), and no sample
// stands outside the family declared before it.
TEST(MetricsTest, EveryFamilyHasOneHelpThenTypeBeforeItsSamples) {
  Metrics metrics;
  metrics.CountRequest("stream", "GET", 200);
  metrics.ObserveAppendLatency(900);
  StoreCommitStats stats;
  stats.available = true;
  stats.CountSync(2, 10, 5);
  const std::string text =
      RenderInfo({{"version", "1"}}, "fsync") + metrics.Render() + RenderStoreCommitStats(stats);
  std::set<std::string> families;
  std::string family;
  std::string type;
  std::string expect_type;  // the family whose TYPE line must come next
  size_t samples = 0;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    ASSERT_NE(end, std::string::npos) << "the text must end with a newline";
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.starts_with("# HELP ")) {
      ASSERT_TRUE(expect_type.empty()) << line;
      expect_type = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(families.insert(expect_type).second) << "HELP twice for " << expect_type;
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      ASSERT_FALSE(expect_type.empty()) << "TYPE without HELP: " << line;
      family = expect_type;
      expect_type.clear();
      ASSERT_TRUE(line.starts_with("# TYPE " + family + " ")) << line;
      type = line.substr(8 + family.size());
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      continue;
    }
    ASSERT_TRUE(expect_type.empty()) << "a sample between HELP and TYPE: " << line;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    if (type == "histogram") {
      EXPECT_TRUE(name == family + "_bucket" || name == family + "_sum" ||
                  name == family + "_count")
          << line;
    } else {
      EXPECT_EQ(name, family) << line;
    }
    ++samples;
  }
  EXPECT_TRUE(families.contains("runnel_info"));
  EXPECT_TRUE(families.contains("runnel_http_bytes_out_total"));
  EXPECT_TRUE(families.contains("runnel_store_reserve_draws_total"));
  EXPECT_GT(samples, families.size());
}

TEST(StoreCommitMetricsTest, RendersCumulativeBucketsAndNothingWhenUnavailable) {
  EXPECT_EQ(RenderStoreCommitStats(StoreCommitStats{}), "");
  StoreCommitStats stats;
  stats.available = true;
  stats.CountSync(1, 100, 250);
  stats.CountSync(3, 300, 750);
  stats.CountSync(5000, 1, 1);  // above the last bound
  stats.checkpoint_waits = 2;
  stats.checkpoint_wait_micros = 1500000;
  stats.checkpoints = 7;
  stats.checkpoint_build_micros = 250000;
  stats.segment_rolls = 9;
  stats.segment_rolls_unprepared = 4;
  stats.cleaner_bytes = 12345;
  stats.space_reclaims = 2;
  stats.reserve_draws = 1;
  stats.segment_roll_micros = 125000;
  const std::string text = RenderStoreCommitStats(stats);
  EXPECT_NE(text.find("runnel_store_segment_rolls_total 9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_store_segment_rolls_unprepared_total 4\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_cleaner_bytes_total 12345\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_store_space_reclaims_total 2\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_reserve_draws_total 1\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_segment_roll_seconds_total 0.125\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_checkpoints_total 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_store_checkpoint_build_seconds_total 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_checkpoint_waits_total 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_store_checkpoint_wait_seconds_total 1.5\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_syncs_total 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_store_synced_bytes_total 401\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_store_sync_seconds_total 0.001001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runnel_store_records_per_sync_bucket{le=\"1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_records_per_sync_bucket{le=\"2\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_records_per_sync_bucket{le=\"4\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_records_per_sync_bucket{le=\"1024\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_records_per_sync_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_records_per_sync_sum 5004\n"), std::string::npos);
  EXPECT_NE(text.find("runnel_store_records_per_sync_count 3\n"), std::string::npos);
}

}  // namespace
}  // namespace runnel::server
