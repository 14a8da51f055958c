// The floor under the log store's append latency on this machine, without runnel: a loop of
// one 1.7 KB pwrite + fdatasync (one commit group at 20,000 appends/s) into a pre-zeroed file,
// as the log writer does. Each case prints p50, p99 and max of one write + sync, and how much of
// the mean was spent waiting for a CPU after the sync returned (the thread's run-queue delay,
// /proc/thread-self/schedstat):
//   - default slice: the thread as the kernel schedules it by default;
//   - 200 us slice: with the short slice the log writer asks for (log_writer.cc), which on a
//     busy machine lets it run as soon as its sync returns (Linux 6.12+);
//   - zeros at once / zeros in steps: while a second thread writes 64 MiB of zeros to another
//     file, as the log store's preparer makes a segment or the space reserve, all at once and
//     synced at the end (as before) or in synced 256 KiB steps (as now); only the syncs during
//     the zeroing count.
// Usage: sync_probe_bench [--dir DIR] [--seconds S]. Every case runs S seconds (default 2, at
// most 60); files are removed at the end.
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_slice.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kGroupBytes = 1700;
constexpr size_t kFileBytes = 64u << 20;
constexpr size_t kStepBytes = 256u << 10;
constexpr size_t kChunk = 1u << 20;

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// This thread's total time spent runnable but not running, in microseconds.
double RunDelayMicros() {
  char buf[128] = {0};
  const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY);
  if (fd < 0) return 0;
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n <= 0) return 0;
  unsigned long long run = 0, wait = 0;
  if (std::sscanf(buf, "%llu %llu", &run, &wait) != 2) return 0;
  return static_cast<double>(wait) / 1000.0;
}

// Sets the calling thread's slice (0: the kernel's default), as the log writer does.
void SetSlice(uint64_t micros) {
  runnel::RequestShortSlice(std::chrono::microseconds(micros));
}

// Writes `bytes` of zeros to `fd`: in synced pieces of `step` bytes, or (step 0) in 1 MiB
// writes synced once at the end.
void Zero(int fd, size_t bytes, size_t step) {
  const std::string zeros(kChunk, '\0');
  const size_t piece = step != 0 ? std::min(step, kChunk) : kChunk;
  for (size_t p = 0; p < bytes; p += piece) {
    if (::pwrite(fd, zeros.data(), std::min(piece, bytes - p), static_cast<off_t>(p)) < 0) {
      std::perror("pwrite");
      std::exit(1);
    }
    if (step != 0) ::fdatasync(fd);
  }
  ::fdatasync(fd);
}

// Writes and syncs one group at a time into `fd` until `stop` is set or `seconds` pass.
void Loop(int fd, double seconds, const std::atomic<bool>* stop, const char* name) {
  const std::string group(kGroupBytes, 'x');
  std::vector<double> lat;
  double waited = 0;
  uint64_t pos = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while ((stop == nullptr || !stop->load()) && Clock::now() < end) {
    const double r0 = RunDelayMicros();
    const auto t0 = Clock::now();
    if (::pwrite(fd, group.data(), group.size(), static_cast<off_t>(pos)) < 0 ||
        ::fdatasync(fd) != 0) {
      std::perror("write+fdatasync");
      std::exit(1);
    }
    lat.push_back(Micros(Clock::now() - t0));
    waited += RunDelayMicros() - r0;
    pos = (pos + kGroupBytes) % (kFileBytes - kGroupBytes);
  }
  if (lat.empty()) {
    std::printf("%-16s no sync completed\n", name);
    return;
  }
  double sum = 0;
  for (double v : lat) sum += v;
  std::sort(lat.begin(), lat.end());
  auto q = [&](double p) {
    return lat[static_cast<size_t>(p * static_cast<double>(lat.size() - 1))];
  };
  std::printf(
      "%-16s %6zu syncs  p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms  mean %.3f ms, of which "
      "waiting for a CPU %.3f ms\n",
      name, lat.size(), q(0.5) / 1000, q(0.99) / 1000, lat.back() / 1000,
      sum / static_cast<double>(lat.size()) / 1000,
      waited / static_cast<double>(lat.size()) / 1000);
}

// The loop while another thread zeroes a 64 MiB file with `step` (0: at once).
void WithZeroing(int fd, const std::string& path, size_t step, double seconds, const char* name) {
  std::atomic<bool> done{false};
  std::thread zeroing([&] {
    SetSlice(0);  // the preparer keeps the default slice
    const int zf = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (zf < 0) {
      std::perror("open");
      std::exit(1);
    }
    Zero(zf, kFileBytes, step);
    ::close(zf);
    ::unlink(path.c_str());
    done = true;
  });
  const auto t0 = Clock::now();
  Loop(fd, seconds, &done, name);
  zeroing.join();
  std::printf("%-16s (zeroing took %.0f ms)\n", "", Micros(Clock::now() - t0) / 1000);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  double seconds = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::clamp(std::atof(argv[++i]), 0.1, 60.0);
    } else {
      std::fprintf(stderr, "usage: sync_probe_bench [--dir DIR] [--seconds S]\n");
      return 2;
    }
  }
  const std::string log_path = dir + "/sync_probe.log";
  const std::string zero_path = dir + "/sync_probe.zeros";
  const int fd = ::open(log_path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    std::perror("open");
    return 1;
  }
  Zero(fd, kFileBytes, 0);
  std::printf("1.7 KB pwrite + fdatasync in a loop, %s, %.1f s a case\n", dir.c_str(), seconds);
  Loop(fd, seconds, nullptr, "default slice");
  SetSlice(200);
  Loop(fd, seconds, nullptr, "200 us slice");
  WithZeroing(fd, zero_path, 0, seconds, "zeros at once");
  WithZeroing(fd, zero_path, kStepBytes, seconds, "zeros in steps");
  ::close(fd);
  ::unlink(log_path.c_str());
  return 0;
}
