// Listing a scope of a million streams on the memory store: one page of 1,000 in name order and
// in natural order (Store::ListStreamsWithPrefix, Store::ListStreamsNatural), from the start, from
// a cursor deep inside, and under a prefix that ends in a digit (one key range per digit count).
// Each page costs the streams it returns, not the names before the cursor, so a page deep in the
// list should take about as long as the first.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runnel/store.h"
#include "store/natural_index.h"

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

// Building the natural index of a million streams handed over in name order, as a log-store
// restart does (checkpoints list streams by name): the time, and the resident bytes a stream.
long ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  long resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

struct NameOf {
  std::string_view operator()(const std::string* s) const { return *s; }
};

void BM_BuildNaturalIndex(benchmark::State& state) {
  std::vector<std::string> names;
  for (int i = 1; i <= kStreams; ++i) names.push_back("s-" + std::to_string(i));
  std::sort(names.begin(), names.end());
  for (auto _ : state) {
    runnel::store::NaturalIndex<const std::string*, NameOf> index;
    const long before = ResidentBytes();
    for (const std::string& name : names) index.Add("global", &name);
    state.counters["bytes_per_stream"] =
        static_cast<double>(ResidentBytes() - before) / static_cast<double>(kStreams);
    state.PauseTiming();
    index.Clear();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kStreams);
}
BENCHMARK(BM_BuildNaturalIndex)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
