// runnel::Streams::Create on every store: what a valid create is, the idempotent re-create and
// forks (docs/semantics.md E1, E2, E12, E13). The HTTP door's PUT makes the same calls; the
// conformance suite's create and fork cases cover it there.
#include <gtest/gtest.h>

#include "core/protocol_streams_suite.h"
#include "runnel/streams.h"

namespace runnel::testing {

namespace {

const StreamScope kGlobal = StreamScope::Global();

ProtocolCreate Typed(std::string content_type) {
  ProtocolCreate create;
  create.content_type = std::move(content_type);
  return create;
}

ProtocolCreate ForkOf(std::string source, std::optional<uint64_t> position,
                      uint64_t sub_offset = 0) {
  ProtocolCreate create;
  create.fork = ProtocolFork{
      .scope = kGlobal, .name = std::move(source), .position = position, .sub_offset = sub_offset};
  return create;
}

std::vector<std::string> Records(Door& door, const std::string& name) {
  auto read = door.streams.Read(kGlobal, name, 0);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  return read.ok() ? read->records : std::vector<std::string>{};
}

}  // namespace

TEST_P(ProtocolStreamsTest, Create_ContentTypeTtlAndDefaults) {
  Door door(*registry_, clock_);
  ProtocolCreate ttl = Typed("text/plain");
  ttl.ttl_s = 30;
  auto made = door.streams.Create(kGlobal, "ttl", ttl);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(made->created);
  EXPECT_EQ(made->tail_position, 0u);
  EXPECT_FALSE(made->closed);
  auto found = door.streams.Lookup(kGlobal, "ttl");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->info.spec.content_type, "text/plain");
  EXPECT_EQ(found->ttl_s, 30u);
  EXPECT_FALSE(found->expires_at);
  // No content type: application/octet-stream.
  ASSERT_TRUE(door.streams.Create(kGlobal, "bytes", ProtocolCreate{}).ok());
  EXPECT_EQ(door.streams.Lookup(kGlobal, "bytes")->info.spec.content_type,
            "application/octet-stream");
}

TEST_P(ProtocolStreamsTest, E1_E2_TtlAndExpiresAtTogetherOrABadTimeAreRefused) {
  Door door(*registry_, clock_);
  ProtocolCreate both = Typed("text/plain");
  both.ttl_s = 10;
  both.expires_at = Rfc3339(clock_.NowMs() + 60'000);
  EXPECT_EQ(door.streams.Create(kGlobal, "both", both).status().code(),
            StatusCode::kInvalidArgument);
  ProtocolCreate no_such_day = Typed("text/plain");
  no_such_day.expires_at = "2023-02-29T00:00:00Z";  // E7
  EXPECT_EQ(door.streams.Create(kGlobal, "both", no_such_day).status().code(),
            StatusCode::kInvalidArgument);
  // Nothing was created by either.
  EXPECT_EQ(door.streams.Lookup(kGlobal, "both").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(registry_->store().GetStream(kGlobal.Label(), "both").status().code(),
            StatusCode::kNotFound);
}

TEST_P(ProtocolStreamsTest, E12_AReCreateWithTheSameConfigurationIsIdempotent) {
  Door door(*registry_, clock_);
  ProtocolCreate create = Typed("text/plain");
  create.ttl_s = 60;
  ASSERT_TRUE(door.streams.Create(kGlobal, "s", create).ok());
  ASSERT_TRUE(door.streams.Append(kGlobal, "s", Text("a")).ok());
  // Content types compare as media types: case and parameters aside.
  ProtocolCreate again = create;
  again.content_type = "Text/Plain";
  auto same = door.streams.Create(kGlobal, "s", again);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_FALSE(same->created);
  EXPECT_EQ(same->tail_position, 1u);  // the existing stream, records kept
  EXPECT_EQ(Records(door, "s"), std::vector<std::string>{"a"});
  // Octet-stream named or implied is the same configuration.
  ASSERT_TRUE(door.streams.Create(kGlobal, "o", ProtocolCreate{}).ok());
  auto implied = door.streams.Create(kGlobal, "o", Typed("application/octet-stream"));
  ASSERT_TRUE(implied.ok());
  EXPECT_FALSE(implied->created);
}

TEST_P(ProtocolStreamsTest, E12_AReCreateWithAnotherConfigurationConflicts) {
  Door door(*registry_, clock_);
  ProtocolCreate create = Typed("text/plain");
  create.ttl_s = 60;
  ASSERT_TRUE(door.streams.Create(kGlobal, "s", create).ok());
  ProtocolCreate other_type = create;
  other_type.content_type = "application/json";
  ProtocolCreate other_ttl = create;
  other_ttl.ttl_s = 61;
  ProtocolCreate no_ttl = Typed("text/plain");
  ProtocolCreate closed = create;
  closed.closed = true;
  ProtocolCreate capped = create;
  capped.retention.max_events = 5;
  for (const ProtocolCreate* c : {&other_type, &other_ttl, &no_ttl, &closed, &capped}) {
    EXPECT_EQ(door.streams.Create(kGlobal, "s", *c).status().code(), StatusCode::kAlreadyExists);
  }
  auto kept = door.streams.Lookup(kGlobal, "s");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->ttl_s, 60u);
  EXPECT_FALSE(kept->closed);
}

TEST_P(ProtocolStreamsTest, E12_ClosedAndWithAnInitialBody) {
  Door door(*registry_, clock_);
  ProtocolCreate closed = Typed("text/plain");
  closed.closed = true;
  auto made = door.streams.Create(kGlobal, "closed", closed);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(made->closed);
  EXPECT_EQ(made->tail_position, 0u);
  EXPECT_EQ(door.streams.Append(kGlobal, "closed", Text("x")).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(door.streams.Lookup(kGlobal, "closed")->closed);

  ProtocolCreate text = Typed("text/plain");
  text.body = "hello";
  auto one = door.streams.Create(kGlobal, "text", text);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->tail_position, 1u);
  EXPECT_EQ(Records(door, "text"), std::vector<std::string>{"hello"});

  // JSON mode: the array's messages, each a record; closing with them.
  ProtocolCreate json = Typed("application/json");
  json.body = R"([1, {"a": 2}, "three"])";
  json.closed = true;
  auto three = door.streams.Create(kGlobal, "json", json);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->tail_position, 3u);
  EXPECT_TRUE(three->closed);
  EXPECT_EQ(Records(door, "json"), (std::vector<std::string>{"1", R"({"a":2})", R"("three")"}));

  // An empty array creates an empty stream; bad JSON creates nothing.
  ProtocolCreate empty = Typed("application/json");
  empty.body = "[]";
  auto none = door.streams.Create(kGlobal, "empty", empty);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tail_position, 0u);
  ProtocolCreate bad = Typed("application/json");
  bad.body = "{bad";
  EXPECT_EQ(door.streams.Create(kGlobal, "bad", bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->store().GetStream(kGlobal.Label(), "bad").status().code(),
            StatusCode::kNotFound);
}

TEST_P(ProtocolStreamsTest, E13_AForkInheritsTheSourceThroughItsPosition) {
  Door door(*registry_, clock_);
  ProtocolCreate source = Typed("text/plain");
  source.ttl_s = 600;
  ASSERT_TRUE(door.streams.Create(kGlobal, "src", source).ok());
  for (const char* body : {"a", "b", "c"})
    ASSERT_TRUE(door.streams.Append(kGlobal, "src", Text(body)).ok());
  auto fork = door.streams.Create(kGlobal, "at2", ForkOf("src", 2));
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  EXPECT_TRUE(fork->created);
  EXPECT_EQ(fork->tail_position, 2u);
  EXPECT_EQ(Records(door, "at2"), (std::vector<std::string>{"a", "b"}));
  // The same offsets: a read after position 1 starts at the second record.
  EXPECT_EQ(door.streams.Read(kGlobal, "at2", 1)->records, std::vector<std::string>{"b"});
  // Its own content type and TTL are the source's; it grows apart from it.
  auto found = door.streams.Lookup(kGlobal, "at2");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->info.spec.content_type, "text/plain");
  EXPECT_EQ(found->ttl_s, 600u);
  ASSERT_TRUE(door.streams.Append(kGlobal, "at2", Text("x")).ok());
  ASSERT_TRUE(door.streams.Append(kGlobal, "src", Text("d")).ok());
  EXPECT_EQ(Records(door, "at2"), (std::vector<std::string>{"a", "b", "x"}));
  EXPECT_EQ(Records(door, "src"), (std::vector<std::string>{"a", "b", "c", "d"}));
  // No position: the source's tail. Position 0: nothing inherited.
  auto tail = door.streams.Create(kGlobal, "tail", ForkOf("src", std::nullopt));
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->tail_position, 4u);
  auto empty = door.streams.Create(kGlobal, "none", ForkOf("src", 0));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->tail_position, 0u);
  EXPECT_TRUE(Records(door, "none").empty());
  // A re-create of the same fork is idempotent; at another position it conflicts.
  auto again = door.streams.Create(kGlobal, "at2", ForkOf("src", 2));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(door.streams.Create(kGlobal, "at2", ForkOf("src", 1)).status().code(),
            StatusCode::kAlreadyExists);
  // A fork naming another content type than its source's is refused.
  ProtocolCreate typed = ForkOf("src", 1);
  typed.content_type = "application/json";
  EXPECT_EQ(door.streams.Create(kGlobal, "typed", typed).status().code(),
            StatusCode::kAlreadyExists);
}

TEST_P(ProtocolStreamsTest, E13_AForkWithASubOffset) {
  Door door(*registry_, clock_);
  Make(door, "bytes", "text/plain");
  ASSERT_TRUE(door.streams.Append(kGlobal, "bytes", Text("hello")).ok());
  ASSERT_TRUE(door.streams.Append(kGlobal, "bytes", Text("world")).ok());
  // A byte stream: the first sub-offset bytes of the next record.
  auto part = door.streams.Create(kGlobal, "part", ForkOf("bytes", 1, 3));
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->tail_position, 2u);
  EXPECT_EQ(Records(door, "part"), (std::vector<std::string>{"hello", "wor"}));
  EXPECT_EQ(door.streams.Create(kGlobal, "past", ForkOf("bytes", 1, 6)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(door.streams.Create(kGlobal, "end", ForkOf("bytes", 2, 1)).status().code(),
            StatusCode::kInvalidArgument);
  // A JSON stream: that many more messages.
  ProtocolCreate json = Typed("application/json");
  json.body = "[1, 2, 3]";
  ASSERT_TRUE(door.streams.Create(kGlobal, "json", json).ok());
  auto more = door.streams.Create(kGlobal, "more", ForkOf("json", 1, 1));
  ASSERT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_EQ(more->tail_position, 2u);
  EXPECT_EQ(Records(door, "more"), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(door.streams.Create(kGlobal, "over", ForkOf("json", 1, 3)).status().code(),
            StatusCode::kInvalidArgument);
  // Nothing was created by the refused ones.
  for (const char* refused : {"past", "end", "over"}) {
    EXPECT_EQ(registry_->store().GetStream(kGlobal.Label(), refused).status().code(),
              StatusCode::kNotFound)
        << refused;
  }
}

TEST_P(ProtocolStreamsTest, E13_AForkBeyondTheTailOrOfNoSourceIsRefused) {
  Door door(*registry_, clock_);
  Make(door, "src", "text/plain");
  ASSERT_TRUE(door.streams.Append(kGlobal, "src", Text("a")).ok());
  EXPECT_EQ(door.streams.Create(kGlobal, "beyond", ForkOf("src", 2)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(door.streams.Create(kGlobal, "orphan", ForkOf("missing", 0)).status().code(),
            StatusCode::kNotFound);
  // A source in another scope is another stream.
  ProtocolCreate elsewhere = ForkOf("src", 0);
  elsewhere.fork->scope = StreamScope::Tenant("t1");
  EXPECT_EQ(door.streams.Create(kGlobal, "elsewhere", elsewhere).status().code(),
            StatusCode::kNotFound);
  // A soft-deleted source (deleted while a fork holds it) takes no more forks.
  ASSERT_TRUE(door.streams.Create(kGlobal, "holder", ForkOf("src", 1)).ok());
  ASSERT_TRUE(door.streams.Delete(kGlobal, "src").ok());
  EXPECT_EQ(door.streams.Create(kGlobal, "late", ForkOf("src", 1)).status().code(),
            StatusCode::kFailedPrecondition);
  // Nor can the name be created again while the fork holds it.
  EXPECT_EQ(door.streams.Create(kGlobal, "src", Typed("text/plain")).status().code(),
            StatusCode::kAlreadyExists);
  // Its last fork gone, the name is free.
  ASSERT_TRUE(door.streams.Delete(kGlobal, "holder").ok());
  auto fresh = door.streams.Create(kGlobal, "src", Typed("text/plain"));
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE(fresh->created);
  for (const char* refused : {"beyond", "orphan", "elsewhere", "late"}) {
    EXPECT_EQ(registry_->store().GetStream(kGlobal.Label(), refused).status().code(),
              StatusCode::kNotFound)
        << refused;
  }
}

TEST_P(ProtocolStreamsTest, E13_TooManyForksAndTooLargeAForkAreRefused) {
  Door door(*registry_, clock_, StreamsOptions{.max_forks_per_stream = 2, .max_fork_bytes = 8});
  Make(door, "src", "text/plain");
  ASSERT_TRUE(door.streams.Append(kGlobal, "src", Text("abcde")).ok());
  ASSERT_TRUE(door.streams.Create(kGlobal, "f1", ForkOf("src", 1)).ok());
  ASSERT_TRUE(door.streams.Create(kGlobal, "f2", ForkOf("src", 0)).ok());
  EXPECT_EQ(door.streams.Create(kGlobal, "f3", ForkOf("src", 0)).status().code(),
            StatusCode::kFailedPrecondition);
  // A fork removed frees its place.
  ASSERT_TRUE(door.streams.Delete(kGlobal, "f2").ok());
  ASSERT_TRUE(door.streams.Create(kGlobal, "f3", ForkOf("src", 0)).ok());
  // Five bytes copied fit in eight; ten do not.
  ASSERT_TRUE(door.streams.Append(kGlobal, "f1", Text("fghij")).ok());
  ASSERT_TRUE(door.streams.Delete(kGlobal, "f3").ok());
  EXPECT_EQ(door.streams.Create(kGlobal, "big", ForkOf("f1", 2)).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(door.streams.Create(kGlobal, "small", ForkOf("f1", 1)).ok());
  EXPECT_EQ(registry_->store().GetStream(kGlobal.Label(), "big").status().code(),
            StatusCode::kNotFound);
}

}  // namespace runnel::testing
