// Listing a scope of a million streams on the memory store: one page of 1,000 in name order and
// in natural order (Store::ListStreamsWithPrefix, Store::ListStreamsNatural), from the start, from
// a cursor deep inside, and under a prefix that ends in a digit (one key range per digit count).
// Each page costs the streams it returns, not the names before the cursor, so a page deep in the
// list should take about as long as the first.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "runnel/store.h"

namespace {

constexpr int kStreams = 1000000;
constexpr size_t kPage = 1000;

runnel::Store& Million() {
  static std::unique_ptr<runnel::Store> store = [] {
    auto s = runnel::NewMemoryStore();
    runnel::StreamSpec spec;
    spec.ns = "global";
    for (int i = 1; i <= kStreams; ++i) {
      spec.name = "s-" + std::to_string(i);
      (void)s->CreateStream(spec);
    }
    return s;
  }();
  return *store;
}

// state.range(0): 0 from the start, 1 after "s-900000"; range(1): 0 name order, 1 natural.
void BM_ListPage(benchmark::State& state) {
  runnel::Store& store = Million();
  const std::string after = state.range(0) == 0 ? "" : "s-900000";
  size_t listed = 0;
  for (auto _ : state) {
    auto page = state.range(1) == 0 ? store.ListStreamsWithPrefix("global", "s-", after, kPage)
                                    : store.ListStreamsNatural("global", "s-", after, kPage);
    listed += page.ok() ? page->size() : 0;
    benchmark::DoNotOptimize(page);
  }
  state.SetItemsProcessed(static_cast<int64_t>(listed));
}
BENCHMARK(BM_ListPage)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

// Natural order under prefix "s-9": "s-9", "s-90".. "s-99", "s-900".. — one range per digit count.
void BM_ListNaturalDigitPrefix(benchmark::State& state) {
  runnel::Store& store = Million();
  size_t listed = 0;
  for (auto _ : state) {
    auto page = store.ListStreamsNatural("global", "s-9", "s-9999", kPage);
    listed += page.ok() ? page->size() : 0;
    benchmark::DoNotOptimize(page);
  }
  state.SetItemsProcessed(static_cast<int64_t>(listed));
}
BENCHMARK(BM_ListNaturalDigitPrefix)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
