// Bearer tokens: creation, authentication, expiry, revocation, persistence (SEMANTICS Z5: the
// transport supplies the principal; this is where it comes from).
#include "core/token_store.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

namespace runnel {
namespace {

class TokenStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/runnel-tokens-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tokens";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<TokenStore> OpenStore() {
    auto s = TokenStore::Open(path_, &clock_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  ManualClock clock_{1000};
  std::string dir_;
  std::string path_;
};

TEST_F(TokenStoreTest, ATokenAuthenticatesAsItsGrant) {
  auto store = OpenStore();
  EXPECT_TRUE(store->empty());
  auto tenant = store->Create(TokenGrant{"acme", false, std::nullopt, "ci"});
  auto platform = store->Create(TokenGrant{std::nullopt, true, std::nullopt, ""});
  ASSERT_TRUE(tenant.ok() && platform.ok());
  EXPECT_EQ(tenant->rfind("rnl_", 0), 0u);
  auto p = store->Authenticate(*tenant);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->tenant, "acme");
  EXPECT_FALSE(p->cross_tenant);
  auto q = store->Authenticate(*platform);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->tenant.has_value());
  EXPECT_TRUE(q->cross_tenant);
}

TEST_F(TokenStoreTest, WrongMalformedAndExpiredTokensAreDenied) {
  auto store = OpenStore();
  auto token = store->Create(TokenGrant{"acme", false, 5000, ""});
  ASSERT_TRUE(token.ok());
  std::string tampered = *token;
  tampered.back() = tampered.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(store->Authenticate(tampered).status().message(), "unknown token");
  EXPECT_EQ(store->Authenticate("").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(store->Authenticate("Bearer x").status().message(), "malformed token");
  EXPECT_TRUE(store->Authenticate(*token).ok());
  clock_.Set(5000);
  auto expired = store->Authenticate(*token);
  EXPECT_EQ(expired.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(expired.status().message(), "expired token");
}

TEST_F(TokenStoreTest, OnlyHashesArePersistedAndTokensSurviveAReopen) {
  std::string token;
  {
    auto store = OpenStore();
    auto t = store->Create(TokenGrant{"acme", true, std::nullopt, "alice laptop 100%"});
    ASSERT_TRUE(t.ok());
    token = *t;
  }
  std::ifstream in(path_);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string secret = token.substr(token.rfind('_') + 1);
  EXPECT_EQ(contents.find(secret), std::string::npos);
  auto store = OpenStore();
  auto p = store->Authenticate(token);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->tenant, "acme");
  EXPECT_TRUE(p->cross_tenant);
  auto list = store->List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].grant.note, "alice laptop 100%");
  EXPECT_EQ(list[0].created_at_ms, 1000u);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
}

TEST_F(TokenStoreTest, RevokedTokensStopWorkingAcrossReopen) {
  auto store = OpenStore();
  auto keep = store->Create(TokenGrant{"acme", false, std::nullopt, ""});
  auto drop = store->Create(TokenGrant{"acme", false, std::nullopt, ""});
  ASSERT_TRUE(keep.ok() && drop.ok());
  const std::string drop_id = drop->substr(4, 12);
  ASSERT_TRUE(store->Revoke(drop_id).ok());
  EXPECT_EQ(store->Revoke(drop_id).code(), StatusCode::kNotFound);
  EXPECT_FALSE(store->Authenticate(*drop).ok());
  store.reset();
  auto again = OpenStore();
  EXPECT_FALSE(again->Authenticate(*drop).ok());
  EXPECT_TRUE(again->Authenticate(*keep).ok());
}

TEST_F(TokenStoreTest, TokensAreDistinct) {
  auto store = OpenStore();
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    auto t = store->Create(TokenGrant{"acme", false, std::nullopt, ""});
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(seen.insert(*t).second);
  }
  EXPECT_EQ(store->List().size(), 50u);
}

TEST_F(TokenStoreTest, BadTenantIdsAndCorruptFilesAreRefusedByName) {
  auto store = OpenStore();
  EXPECT_EQ(store->Create(TokenGrant{"has space", false, std::nullopt, ""}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Create(TokenGrant{"", false, std::nullopt, ""}).status().code(),
            StatusCode::kInvalidArgument);
  store.reset();
  std::ofstream(path_) << "# comment\nv1 0123456789ab deadbeef acme 0 - 1 x\n";
  auto bad = TokenStore::Open(path_, &clock_);
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bad.status().message().find("line 2"), std::string_view::npos);
}

TEST(TenantIdTest, Validation) {
  EXPECT_TRUE(ValidateTenantId("acme-01.eu_west").ok());
  EXPECT_FALSE(ValidateTenantId("a/b").ok());
  EXPECT_FALSE(ValidateTenantId(std::string(129, 'a')).ok());
  // The token file's word for "no tenant": as an id it would have made a platform token.
  EXPECT_FALSE(ValidateTenantId("-").ok());
  EXPECT_TRUE(ValidateTenantId("-a").ok());
}

}  // namespace
}  // namespace runnel
