// Registry overhead on the memory store: what the engine costs above the data structure it
// keeps. Each figure is printed next to a baseline measured in the same run (a mutex-guarded
// std::deque append), so the ratio survives a noisy machine.
#include <benchmark/benchmark.h>

#include <deque>
#include <mutex>
#include <string>

#include "runnel/registry.h"

namespace {

const runnel::StreamScope kScope = runnel::StreamScope::Global();

void BM_BaselineDequeAppend(benchmark::State& state) {
  std::mutex mu;
  std::deque<std::string> log;
  const std::string payload(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) {
    std::lock_guard lock(mu);
    log.push_back(payload);
    if (log.size() > 100000) log.pop_front();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_BaselineDequeAppend)->Arg(100)->Arg(4096);

void BM_RegistryAppend(benchmark::State& state) {
  runnel::StreamRegistry reg;
  runnel::StreamRetention retention;
  retention.max_events = 100000;
  (void)reg.CreateStream(kScope, "bench", retention);
  const std::string payload(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) {
    auto r = reg.Append(kScope, "bench", std::nullopt, payload, 1);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_RegistryAppend)->Arg(100)->Arg(4096);

void BM_RegistryAppendBatch100(benchmark::State& state) {
  runnel::StreamRegistry reg;
  runnel::StreamRetention retention;
  retention.max_events = 100000;
  (void)reg.CreateStream(kScope, "bench", retention);
  const std::string payload(100, 'x');
  for (auto _ : state) {
    std::vector<runnel::AppendRecord> batch(100, runnel::AppendRecord{std::nullopt, payload});
    auto r = reg.AppendBatch(kScope, "bench", std::move(batch));
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_RegistryAppendBatch100);

void BM_RegistryAppendManyThreads(benchmark::State& state) {
  static runnel::StreamRegistry* reg = nullptr;
  if (state.thread_index() == 0) {
    reg = new runnel::StreamRegistry();
    for (int i = 0; i < 64; ++i) {
      (void)reg->CreateStream(kScope, "s" + std::to_string(i), runnel::StreamRetention{100000});
    }
  }
  const std::string name = "s" + std::to_string(state.thread_index() % 64);
  const std::string payload(100, 'x');
  for (auto _ : state) {
    auto r = reg->Append(kScope, name, std::nullopt, payload, 1);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    delete reg;
    reg = nullptr;
  }
}
BENCHMARK(BM_RegistryAppendManyThreads)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

void BM_RegistryReadPage(benchmark::State& state) {
  runnel::StreamRegistry reg;
  (void)reg.CreateStream(kScope, "bench", runnel::StreamRetention{});
  const std::string payload(100, 'x');
  for (int i = 0; i < 100000; ++i) (void)reg.Append(kScope, "bench", std::nullopt, payload, 1);
  uint64_t from = 1;
  for (auto _ : state) {
    auto page = reg.ReadSince(kScope, "bench", from, 1000);
    benchmark::DoNotOptimize(page);
    from = from + 1000 > 99000 ? 1 : from + 1000;
  }
  state.SetItemsProcessed(state.iterations() * 1000);
  state.SetBytesProcessed(state.iterations() * 1000 * 100);
}
BENCHMARK(BM_RegistryReadPage);

}  // namespace

BENCHMARK_MAIN();
