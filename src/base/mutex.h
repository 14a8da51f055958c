// Mutexes whose lock discipline the compiler checks.
//
// clang's -Wthread-safety analysis proves, at compile time, that every member declared
// RUNNEL_GUARDED_BY(mu) is touched only with mu held and that every function declared
// RUNNEL_REQUIRES(mu) is called with it held. The standard library's mutexes carry no
// annotations, so the project's locks are these thin wrappers; with GCC the annotations expand
// to nothing and the wrappers cost nothing. `make thread-safety` runs the analysis over every
// file that takes one of these locks, and `make test` runs it.
//
// Usage:
//   runnel::Mutex mu_;
//   int count_ RUNNEL_GUARDED_BY(mu_);
//   void Bump() { runnel::MutexLock lock(mu_); ++count_; }
//   void BumpLocked() RUNNEL_REQUIRES(mu_) { ++count_; }
//
// Condition variables wait through the lock (MutexLock::Wait), with the condition tested in a
// loop in the caller: a predicate lambda would be analysed as a function of its own, outside
// the lock.
#ifndef RUNNEL_BASE_MUTEX_H_
#define RUNNEL_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define RUNNEL_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define RUNNEL_THREAD_ANNOTATION(x)
#endif

#define RUNNEL_CAPABILITY(x) RUNNEL_THREAD_ANNOTATION(capability(x))
#define RUNNEL_SCOPED_CAPABILITY RUNNEL_THREAD_ANNOTATION(scoped_lockable)
#define RUNNEL_GUARDED_BY(x) RUNNEL_THREAD_ANNOTATION(guarded_by(x))
#define RUNNEL_PT_GUARDED_BY(x) RUNNEL_THREAD_ANNOTATION(pt_guarded_by(x))
#define RUNNEL_ACQUIRED_BEFORE(...) RUNNEL_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define RUNNEL_ACQUIRED_AFTER(...) RUNNEL_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define RUNNEL_REQUIRES(...) RUNNEL_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define RUNNEL_REQUIRES_SHARED(...) \
  RUNNEL_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define RUNNEL_ACQUIRE(...) RUNNEL_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RUNNEL_ACQUIRE_SHARED(...) RUNNEL_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RUNNEL_RELEASE(...) RUNNEL_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RUNNEL_RELEASE_SHARED(...) RUNNEL_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RUNNEL_RELEASE_GENERIC(...) \
  RUNNEL_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define RUNNEL_TRY_ACQUIRE(...) RUNNEL_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define RUNNEL_EXCLUDES(...) RUNNEL_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define RUNNEL_ASSERT_HELD(x) RUNNEL_THREAD_ANNOTATION(assert_capability(x))
#define RUNNEL_RETURN_CAPABILITY(x) RUNNEL_THREAD_ANNOTATION(lock_returned(x))
// For the few functions whose locking the analysis cannot follow; each use says why.
#define RUNNEL_NO_THREAD_SAFETY_ANALYSIS RUNNEL_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace runnel {

// std::mutex, annotated.
class RUNNEL_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() RUNNEL_ACQUIRE() { mu_.lock(); }
  void unlock() RUNNEL_RELEASE() { mu_.unlock(); }
  bool try_lock() RUNNEL_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the mutex where it cannot see so (a callback run under
  // the lock by its owner). Checks nothing at run time.
  void AssertHeld() const RUNNEL_ASSERT_HELD(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// std::shared_mutex, annotated.
class RUNNEL_CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() RUNNEL_ACQUIRE() { mu_.lock(); }
  void unlock() RUNNEL_RELEASE() { mu_.unlock(); }
  void lock_shared() RUNNEL_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RUNNEL_RELEASE_SHARED() { mu_.unlock_shared(); }
  // As Mutex::AssertHeld: the caller holds it exclusively where the analysis cannot see so.
  void AssertHeld() const RUNNEL_ASSERT_HELD(this) {}
  // The same for a shared hold.
  void AssertReaderHeld() const RUNNEL_THREAD_ANNOTATION(assert_shared_capability(this)) {}

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex for its scope (std::unique_lock underneath, so it can wait on a condition
// variable and be released early).
class RUNNEL_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) RUNNEL_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RUNNEL_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex before the end of the scope.
  void Unlock() RUNNEL_RELEASE() { lock_.unlock(); }
  // Takes it again after Unlock.
  void Lock() RUNNEL_ACQUIRE() { lock_.lock(); }

  // Waits on `cv`, releasing the mutex meanwhile. Test the condition in a loop around the
  // call, in the caller, where the analysis sees the mutex held:
  //   while (queue_.empty()) lock.Wait(cv_);
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <typename Rep, typename Period>
  std::cv_status WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout) {
    return cv.wait_for(lock_, timeout);
  }
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(std::condition_variable& cv,
                           std::chrono::time_point<Clock, Duration> deadline) {
    return cv.wait_until(lock_, deadline);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

// Holds a SharedMutex exclusively for its scope.
class RUNNEL_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) RUNNEL_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() RUNNEL_RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared for its scope.
class RUNNEL_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) RUNNEL_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() RUNNEL_RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace runnel

#endif  // RUNNEL_BASE_MUTEX_H_
