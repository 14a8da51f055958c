// SEMANTICS Z1-Z7: tenant authorization, checked before existence.
#include <gtest/gtest.h>

#include "runnel/registry.h"

namespace runnel {
namespace {

const StreamScope kAcme = StreamScope::Tenant("acme");
const StreamScope kGlobex = StreamScope::Tenant("globex");
const StreamScope kGlobal = StreamScope::Global();

TEST(StreamScopeTest, LabelsAndPrincipalMapping) {
  EXPECT_EQ(kGlobal.Label(), "global");
  EXPECT_EQ(kAcme.Label(), "tenant:acme");
  EXPECT_TRUE(kGlobal.is_global());
  EXPECT_FALSE(kAcme.is_global());
  EXPECT_EQ(kAcme.tenant(), "acme");
  EXPECT_EQ(StreamScope::FromPrincipal(std::string("acme")), kAcme);
  EXPECT_EQ(StreamScope::FromPrincipal(std::nullopt), kGlobal);
  EXPECT_FALSE(kAcme == kGlobex);
}

TEST(AuthzTest, Z1_SameScopeNeedsNoCapability) {
  EXPECT_TRUE(CheckStreamAccess(Principal::OfTenant("acme"), kAcme, "s").ok());
  EXPECT_TRUE(CheckStreamAccess(Principal::Platform(), kGlobal, "s").ok());
}

TEST(AuthzTest, Z2_EveryOtherPairIsDeniedWithoutTheCapability) {
  Status other = CheckStreamAccess(Principal::OfTenant("acme"), kGlobex, "orders");
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("tenant:acme"), std::string_view::npos);
  EXPECT_NE(other.message().find("tenant:globex"), std::string_view::npos);
  EXPECT_NE(other.message().find("orders"), std::string_view::npos);
  EXPECT_EQ(CheckStreamAccess(Principal::OfTenant("acme"), kGlobal, "s").code(),
            StatusCode::kPermissionDenied);
  // The platform principal reaching into a tenant needs the capability too.
  EXPECT_EQ(CheckStreamAccess(Principal::Platform(), kAcme, "s").code(),
            StatusCode::kPermissionDenied);
}

TEST(AuthzTest, Z3_TheCapabilityAllowsAnyTarget) {
  StreamRegistry reg;
  ASSERT_TRUE(reg.CreateStream(kGlobex, "orders", StreamRetention{}).ok());
  auto off = reg.AppendAuthorized(std::string("acme"), kGlobex, "orders", std::nullopt, "x",
                                  /*has_cross_tenant_cap=*/true, 1);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, 1u);
  EXPECT_TRUE(CheckStreamAccess(Principal::Platform(true), kAcme, "s").ok());
  EXPECT_TRUE(CheckStreamAccess(Principal::OfTenant("acme", true), kGlobal, "s").ok());
}

TEST(AuthzTest, Z4_DenialComesBeforeExistenceSoNothingLeaks) {
  StreamRegistry reg;
  ASSERT_TRUE(reg.CreateStream(kGlobex, "real", StreamRetention{}).ok());
  const Principal acme = Principal::OfTenant("acme");
  for (const char* name : {"real", "missing"}) {
    auto a = reg.AppendAuthorized(std::string("acme"), kGlobex, name, std::nullopt, "x", false, 1);
    EXPECT_EQ(a.status().code(), StatusCode::kPermissionDenied) << name;
    auto r = reg.ReadSinceAuthorized(std::string("acme"), kGlobex, name, 0, 10, false);
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << name;
    EXPECT_EQ(reg.DescribeAuthorized(acme, kGlobex, name).status().code(),
              StatusCode::kPermissionDenied);
    EXPECT_EQ(reg.ExistsAuthorized(acme, kGlobex, name).status().code(),
              StatusCode::kPermissionDenied);
  }
  // The two denials are indistinguishable apart from the name the caller supplied.
  auto real = reg.ReadSinceAuthorized(std::string("acme"), kGlobex, "real", 0, 10, false);
  auto missing = reg.ReadSinceAuthorized(std::string("acme"), kGlobex, "missing", 0, 10, false);
  std::string a(real.status().message()), b(missing.status().message());
  a.replace(a.find("real"), 4, "X");
  b.replace(b.find("missing"), 7, "X");
  EXPECT_EQ(a, b);
  // An allowed caller learns NotFound for the missing one.
  auto own = reg.ReadSinceAuthorized(std::string("globex"), kGlobex, "missing", 0, 10, false);
  EXPECT_EQ(own.status().code(), StatusCode::kNotFound);
}

TEST(AuthzTest, Z5_TheTransportSuppliesTheCapabilityBoolean) {
  StreamRegistry reg;
  ASSERT_TRUE(reg.CreateStream(kAcme, "s", StreamRetention{}).ok());
  EXPECT_FALSE(reg.AppendAuthorized(std::nullopt, kAcme, "s", std::nullopt, "x", false, 1).ok());
  EXPECT_TRUE(reg.AppendAuthorized(std::nullopt, kAcme, "s", std::nullopt, "x", true, 1).ok());
}

TEST(AuthzTest, Z6_EveryOperationHasAGatedVariant) {
  StreamRegistry reg;
  ASSERT_TRUE(reg.CreateStream(kGlobex, "s", StreamRetention{}).ok());
  ASSERT_TRUE(reg.Append(kGlobex, "s", std::nullopt, "x", 1).ok());
  const Principal denied = Principal::OfTenant("acme");
  const Principal allowed = Principal::OfTenant("globex");
  auto expect_denied = [](const Status& s, const char* op) {
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << op;
  };
  expect_denied(reg.CreateStreamAuthorized(denied, kGlobex, "t", {}), "create");
  expect_denied(reg.ExistsAuthorized(denied, kGlobex, "s").status(), "exists");
  expect_denied(reg.ListStreamsAuthorized(denied, kGlobex).status(), "list");
  expect_denied(reg.DescribeAuthorized(denied, kGlobex, "s").status(), "describe");
  expect_denied(
      reg.AppendBatchAuthorized(denied, kGlobex, "s", {AppendRecord{std::nullopt, "y"}}).status(),
      "append");
  expect_denied(reg.ReadAfterAuthorized(denied, kGlobex, "s", 0, 10).status(), "read_after");
  expect_denied(reg.SaveOffsetAuthorized(denied, kGlobex, "s", "c", 1).status(), "save_offset");
  expect_denied(reg.GetOffsetAuthorized(denied, kGlobex, "s", "c").status(), "get_offset");
  expect_denied(reg.AckAuthorized(denied, kGlobex, "s", "g", 1), "ack");
  expect_denied(reg.ReadNextAuthorized(denied, kGlobex, "s", "g", 10).status(), "read_next");
  expect_denied(reg.PruneAuthorized(denied, kGlobex, "s", 1).status(), "prune");
  expect_denied(reg.ConsumerGroupInfoAuthorized(denied, kGlobex, "s").status(), "group_info");
  expect_denied(reg.SubscribeAuthorized(denied, kGlobex, "s", "g", 0).status(), "subscribe");
  expect_denied(reg.DeleteGroupAuthorized(denied, kGlobex, "s", "c"), "delete_group");
  expect_denied(reg.DeleteStreamAuthorized(denied, kGlobex, "s"), "delete");
  // Nothing changed.
  EXPECT_FALSE(reg.Exists(kGlobex, "t"));
  EXPECT_EQ(reg.Describe(kGlobex, "s")->event_count, 1u);
  EXPECT_TRUE(reg.ConsumerGroupInfo(kGlobex, "s")->empty());

  EXPECT_TRUE(reg.CreateStreamAuthorized(allowed, kGlobex, "t", {}).ok());
  EXPECT_TRUE(*reg.ExistsAuthorized(allowed, kGlobex, "s"));
  EXPECT_EQ(reg.ListStreamsAuthorized(allowed, kGlobex)->size(), 2u);
  EXPECT_TRUE(reg.DescribeAuthorized(allowed, kGlobex, "s")->has_value());
  EXPECT_EQ(reg.AppendBatchAuthorized(allowed, kGlobex, "s", {AppendRecord{std::nullopt, "y"}})
                ->first_offset,
            2u);
  EXPECT_EQ(reg.ReadAfterAuthorized(allowed, kGlobex, "s", 0, 10)->size(), 2u);
  EXPECT_EQ(*reg.SaveOffsetAuthorized(allowed, kGlobex, "s", "c", 1), 1u);
  EXPECT_EQ(*reg.GetOffsetAuthorized(allowed, kGlobex, "s", "c"), 1u);
  EXPECT_TRUE(reg.AckAuthorized(allowed, kGlobex, "s", "c", 2).ok());
  EXPECT_TRUE(reg.ReadNextAuthorized(allowed, kGlobex, "s", "c", 10)->empty());
  EXPECT_EQ(*reg.PruneAuthorized(allowed, kGlobex, "s", 2), 2u);
  EXPECT_EQ(reg.ConsumerGroupInfoAuthorized(allowed, kGlobex, "s")->size(), 1u);
  EXPECT_TRUE(reg.SubscribeAuthorized(allowed, kGlobex, "s", "g", 0).ok());
  EXPECT_TRUE(reg.DeleteGroupAuthorized(allowed, kGlobex, "s", "c").ok());
  EXPECT_TRUE(reg.ConsumerGroupInfo(kGlobex, "s")->empty());
  EXPECT_TRUE(reg.DeleteStreamAuthorized(allowed, kGlobex, "t").ok());
}

TEST(AuthzTest, Z7_PlainCallsAreForTrustedCallersAndSkipChecks) {
  StreamRegistry reg;
  ASSERT_TRUE(reg.CreateStream(kGlobex, "s", StreamRetention{}).ok());
  EXPECT_TRUE(reg.Append(kGlobex, "s", std::nullopt, "x", 1).ok());
  EXPECT_TRUE(reg.ReadSince(kGlobex, "s", 0, 10).ok());
}

}  // namespace
}  // namespace runnel
