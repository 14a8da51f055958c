// A real-process crash test: a child process appends records of random sizes to many streams
// and reports every acknowledged offset on a pipe; the parent kill -9s it at a random moment,
// reopens the directory and checks that every acknowledged record is there with its exact
// bytes. RUNNEL_CRASH_ITERATIONS sets the number of kills (20 by default).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "log/log_harness.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "store/log/crc32c.h"

namespace runnel::testing {
namespace {

constexpr int kStreams = 16;

struct Ack {
  uint32_t stream;
  uint32_t size;
  uint64_t offset;
  uint32_t crc;
  uint32_t pad;
};

LogStoreOptions ChildOptions(const std::string& dir) {
  LogStoreOptions o;
  o.dir = dir;
  o.segment_size = 64 << 10;
  o.checkpoint_interval_bytes = 192 << 10;
  return o;
}

std::string StreamName(int i) {
  return "p" + std::to_string(i);
}

std::string Payload(uint64_t seed, uint64_t n, size_t size) {
  std::string p = std::to_string(seed) + ":" + std::to_string(n) + ":";
  std::mt19937_64 r(seed * 1'000'003 + n);
  while (p.size() < size) p.push_back(static_cast<char>('a' + r() % 26));
  p.resize(std::max(size, p.size()));
  return p;
}

[[noreturn]] void ChildMain(const std::string& dir, int fd, uint64_t seed) {
  auto opened = OpenLogStore(ChildOptions(dir));
  if (!opened.ok()) {
    std::string msg = "open failed: " + opened.status().ToString() + "\n";
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(2);
  }
  std::unique_ptr<Store> store = std::move(*opened);
  std::vector<StreamId> ids;
  for (int i = 0; i < kStreams; ++i) {
    StreamSpec spec = Spec(StreamName(i));
    auto info = store->CreateStream(spec);
    if (!info.ok()) info = store->GetStream("global", spec.name);
    if (!info.ok()) ::_exit(3);
    ids.push_back(info->id);
  }
  std::atomic<uint64_t> counter{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 r(seed + static_cast<uint64_t>(t));
      for (int i = 0; i < 20000; ++i) {
        const uint32_t s = static_cast<uint32_t>(r() % kStreams);
        const size_t size = r() % 10 == 0 ? 1 + r() % 20000 : 1 + r() % 2000;
        const uint64_t n = counter.fetch_add(1);
        std::string payload = Payload(seed, n, size);
        const uint32_t crc = log::Crc32c(payload);
        auto res = AppendPayloads(*store, ids[s], {payload});
        if (!res.ok()) ::_exit(4);
        Ack ack{s, static_cast<uint32_t>(payload.size()), res->first_offset, crc, 0};
        if (::write(fd, &ack, sizeof ack) != static_cast<ssize_t>(sizeof ack)) ::_exit(5);
      }
    });
  }
  for (auto& t : threads) t.join();
  ::_exit(0);
}

// Reads whole Ack structs from fd until `want` acks arrived (or, with want = 0, until EOF).
// Returns false when nothing arrives for 20 s.
bool ReadAcks(int fd, std::vector<Ack>* acks, size_t want, std::string* partial) {
  char buf[4096];
  for (;;) {
    if (want > 0 && acks->size() >= want) return true;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, 20'000);
    if (ready <= 0) return false;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return want == 0;
    partial->append(buf, static_cast<size_t>(n));
    while (partial->size() >= sizeof(Ack)) {
      Ack a;
      std::memcpy(&a, partial->data(), sizeof a);
      acks->push_back(a);
      partial->erase(0, sizeof a);
    }
  }
}

TEST(LogProcessCrashTest, KilledWriterLosesNoAcknowledgedAppend) {
  int iterations = 20;
  if (const char* env = std::getenv("RUNNEL_CRASH_ITERATIONS")) iterations = std::atoi(env);
  ASSERT_GT(iterations, 0);
  TempDir dir;
  std::mt19937_64 rng(20261129);
  std::vector<Ack> all;
  for (int it = 0; it < iterations; ++it) {
    SCOPED_TRACE("kill " + std::to_string(it));
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const uint64_t seed = rng();
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      ChildMain(dir.path(), fds[1], seed);
    }
    ::close(fds[1]);
    std::vector<Ack> acks;
    std::string partial;
    const size_t target = 1 + rng() % 400;
    const bool got = ReadAcks(fds[0], &acks, target, &partial);
    ::kill(pid, SIGKILL);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(ReadAcks(fds[0], &acks, 0, &partial));  // acks already in the pipe count too
    ::close(fds[0]);
    ASSERT_TRUE(got) << "the child stopped acknowledging (exit status " << wstatus << ")";
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "the child died on its own, status " << wstatus;
    all.insert(all.end(), acks.begin(), acks.end());

    auto store = OpenLogStore(ChildOptions(dir.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::vector<StreamInfo> infos;
    for (int i = 0; i < kStreams; ++i) {
      auto info = (*store)->GetStream("global", StreamName(i));
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      infos.push_back(*info);
    }
    for (const Ack& a : all) {
      auto rec = (*store)->ReadAt(infos[a.stream].id, a.offset);
      ASSERT_TRUE(rec.ok()) << rec.status().ToString();
      ASSERT_TRUE(rec->has_value()) << "acknowledged offset " << a.offset << " of "
                                    << StreamName(static_cast<int>(a.stream)) << " is missing";
      ASSERT_EQ((*rec)->payload.size(), a.size);
      ASSERT_EQ(log::Crc32c((*rec)->payload), a.crc) << "bytes differ at offset " << a.offset;
    }
    // Every stream reads back gap-free and undamaged from head to tail.
    for (const StreamInfo& info : infos) {
      uint64_t next = 1, count = 0;
      for (;;) {
        auto recs = (*store)->Read(info.id, next, 1000, 16 << 20);
        ASSERT_TRUE(recs.ok()) << recs.status().ToString();
        if (recs->empty()) break;
        count += recs->size();
        next = recs->back().offset + 1;
      }
      ASSERT_EQ(count, info.event_count);
      ASSERT_EQ(next, info.next_offset);
    }
  }
  EXPECT_GT(all.size(), static_cast<size_t>(iterations)) << "the children acknowledged appends";
}

}  // namespace
}  // namespace runnel::testing
