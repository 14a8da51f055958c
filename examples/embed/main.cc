// Embeds runnel: a tenant's stream with retention, appends, a pure read, a consumer group that
// acknowledges its progress, and a wake-up subscription. Exits non-zero if anything is off.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <runnel/registry.h>

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "embed example: %s failed\n", what);
    std::exit(1);
  }
}

}  // namespace

int main() {
  runnel::StreamRegistry registry;  // in memory; StreamRegistry::Open() selects a durable store
  const auto acme = runnel::StreamScope::Tenant("acme");

  runnel::StreamRetention retention;
  retention.max_events = 1000;
  runnel::Status created = registry.CreateStream(acme, "orders", retention);
  Check(created.ok(), "create");

  auto sub = registry.Subscribe(acme, "orders", "billing", /*last_seq=*/0);
  Check(sub.ok(), "subscribe");

  for (int i = 1; i <= 3; ++i) {
    auto offset =
        registry.Append(acme, "orders", "order-" + std::to_string(i),
                        "{\"amount\":" + std::to_string(i * 10) + "}", registry.clock().NowMs());
    Check(offset.ok() && *offset == static_cast<uint64_t>(i), "append");
  }
  Check(sub->WaitFor(std::chrono::seconds(1)), "wake-up hint");

  // A consumer group reads what it has not acknowledged yet, then acknowledges it.
  auto batch = registry.ReadNext(acme, "orders", "billing", 100);
  Check(batch.ok() && batch->size() == 3, "read_next");
  for (const runnel::StreamEvent& e : *batch) {
    std::printf("%s offset=%llu key=%s payload=%s\n", e.scope.Label().c_str(),
                static_cast<unsigned long long>(e.offset), e.key.value_or("").c_str(),
                e.payload.c_str());
  }
  Check(registry.Ack(acme, "orders", "billing", batch->back().offset).ok(), "ack");
  auto rest = registry.ReadNext(acme, "orders", "billing", 100);
  Check(rest.ok() && rest->empty(), "caught up");

  // Another tenant cannot see acme's stream, and cannot learn whether it exists.
  auto denied = registry.ReadSinceAuthorized(std::string("globex"), acme, "orders", 0, 10,
                                             /*has_cross_tenant_cap=*/false);
  Check(denied.status().code() == runnel::StatusCode::kPermissionDenied, "tenant isolation");

  auto d = registry.Describe(acme, "orders");
  Check(d.has_value() && d->tail_offset == 3, "describe");
  std::printf("orders: head=%llu tail=%llu next=%llu\n",
              static_cast<unsigned long long>(d->head_offset),
              static_cast<unsigned long long>(d->tail_offset),
              static_cast<unsigned long long>(d->next_offset));
  return 0;
}
