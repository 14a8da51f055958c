#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "env/env.h"
#include "env/fault_env.h"
#include "env/mem_env.h"
#include "env/overlay_env.h"
#include "env/relative_errors_env.h"
#include "log/log_harness.h"

namespace runnel::env {
namespace {

using runnel::testing::TempDir;

std::string ReadAll(File& f) {
  auto size = f.Size();
  EXPECT_TRUE(size.ok());
  std::string out(*size, '\0');
  auto got = f.ReadAt(0, out.size(), out.data());
  EXPECT_TRUE(got.ok());
  out.resize(*got);
  return out;
}

void ExerciseBasics(Env* env, const std::string& dir) {
  ASSERT_TRUE(env->CreateDir(dir).ok());
  ASSERT_TRUE(env->CreateDir(dir).ok()) << "CreateDir of an existing directory is OK";
  const std::string path = JoinPath(dir, "a");
  EXPECT_EQ(env->OpenFile(path, false).status().code(), StatusCode::kNotFound);
  auto f = env->OpenFile(path, true);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string_view parts[] = {"hello ", "", "world"};
  ASSERT_TRUE((*f)->WriteAt(0, parts).ok());
  ASSERT_TRUE((*f)->WriteAt(20, std::string_view("!")).ok());
  EXPECT_EQ(*(*f)->Size(), 21u);
  std::string all = ReadAll(**f);
  EXPECT_EQ(all.substr(0, 11), "hello world");
  EXPECT_EQ(all[15], '\0') << "a hole reads as zeros";
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Truncate(5).ok());
  EXPECT_EQ(ReadAll(**f), "hello");
  char buf[8];
  auto got = (*f)->ReadAt(3, 8, buf);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 2u) << "short read at the end of the file";
  EXPECT_EQ(*env->FileSize(path), 5u);
  ASSERT_TRUE(env->SyncDir(dir).ok());
  ASSERT_TRUE(env->RenameFile(path, JoinPath(dir, "b")).ok());
  EXPECT_FALSE(env->FileExists(path));
  EXPECT_TRUE(env->FileExists(JoinPath(dir, "b")));
  auto names = env->ListDir(dir);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"b"});
  ASSERT_TRUE(env->RemoveFile(JoinPath(dir, "b")).ok());
  EXPECT_EQ(env->RemoveFile(JoinPath(dir, "b")).code(), StatusCode::kNotFound);

  auto lock = env->LockFile(JoinPath(dir, "LOCK"));
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  auto again = env->LockFile(JoinPath(dir, "LOCK"));
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable) << again.status().ToString();
  lock->reset();
  EXPECT_TRUE(env->LockFile(JoinPath(dir, "LOCK")).ok()) << "released on destruction";

  const std::string sub = JoinPath(dir, "sub");
  ASSERT_TRUE(env->CreateDir(sub).ok());
  ASSERT_TRUE(env->OpenFile(JoinPath(sub, "f"), true).ok());
  EXPECT_FALSE(env->RemoveDir(sub).ok()) << "a directory holding a file is not removed";
  EXPECT_TRUE(env->FileExists(JoinPath(sub, "f")));
  ASSERT_TRUE(env->RemoveFile(JoinPath(sub, "f")).ok());
  EXPECT_TRUE(env->RemoveDir(sub).ok());
  EXPECT_FALSE(env->FileExists(sub));
}

TEST(PosixEnvTest, FilesDirectoriesAndLocksBehave) {
  TempDir dir;
  ExerciseBasics(Env::Posix(), JoinPath(dir.path(), "d"));
}

TEST(PosixEnvTest, ErrorsCarryThePathAndErrnoText) {
  auto f = Env::Posix()->OpenFile("/nonexistent-dir-for-runnel/x", true);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/nonexistent-dir-for-runnel/x"), std::string_view::npos);
  EXPECT_NE(f.status().message().find("No such file"), std::string_view::npos);
}

TEST(MemEnvTest, FilesDirectoriesAndLocksBehave) {
  MemEnv env;
  ExerciseBasics(&env, "/d");
}

TEST(MemEnvTest, CrashDropsUnsyncedWritesAndUnsyncedCreations) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDir("/d").ok());
  auto f = env.OpenFile("/d/f", true);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(env.SyncDir("/d").ok());
  ASSERT_TRUE((*f)->WriteAt(0, std::string_view("durable")).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->WriteAt(7, std::string_view("-lost")).ok());
  auto g = env.OpenFile("/d/never-synced-dir", true);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(env.PendingOperations(), 1u);
  env.DropUnsyncedData();
  EXPECT_FALSE(env.FileExists("/d/never-synced-dir"));
  EXPECT_EQ((*f)->Sync().code(), StatusCode::kIOError) << "old handles die with the crash";
  auto h = env.OpenFile("/d/f", false);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(ReadAll(**h), "durable");
}

TEST(MemEnvTest, CrashCanKeepAPrefixAndTearTheNextWrite) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDir("/d").ok());
  auto f = env.OpenFile("/d/f", true);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(env.SyncDir("/d").ok());
  ASSERT_TRUE((*f)->WriteAt(0, std::string_view("aaaa")).ok());
  ASSERT_TRUE((*f)->WriteAt(4, std::string_view("bbbb")).ok());
  ASSERT_TRUE((*f)->WriteAt(8, std::string_view("cccc")).ok());
  env.Crash([](const std::string&, size_t pending) { return pending - 2; }, 2);
  auto h = env.OpenFile("/d/f", false);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(ReadAll(**h), "aaaabb");
}

// What `runnel check` relies on to run recovery without touching the directory.
TEST(OverlayEnvTest, ChangesStayInTheOverlayAndTheBaseIsUntouched) {
  MemEnv base;
  ASSERT_TRUE(base.CreateDir("/d").ok());
  for (const char* name : {"a", "b"}) {
    auto f = base.OpenFile(std::string("/d/") + name, true);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->WriteAt(0, std::string("base-") + name).ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  ASSERT_TRUE(base.SyncDir("/d").ok());

  OverlayEnv overlay(&base);
  auto a = overlay.OpenFile("/d/a", false);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(ReadAll(**a), "base-a");
  ASSERT_TRUE((*a)->WriteAt(5, std::string_view("A!")).ok());
  ASSERT_TRUE((*a)->Sync().ok());
  EXPECT_EQ(ReadAll(**a), "base-A!");
  auto a2 = overlay.OpenFile("/d/a", false);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(ReadAll(**a2), "base-A!") << "a second handle sees the overlay's copy";
  ASSERT_TRUE((*a)->Truncate(4).ok());
  EXPECT_EQ(*overlay.FileSize("/d/a"), 4u);

  auto c = overlay.OpenFile("/d/c", true);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->WriteAt(0, std::string_view("new")).ok());
  ASSERT_TRUE(overlay.RemoveFile("/d/b").ok());
  EXPECT_FALSE(overlay.FileExists("/d/b"));
  EXPECT_EQ(overlay.OpenFile("/d/b", false).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(overlay.RemoveFile("/d/b").code(), StatusCode::kNotFound);
  ASSERT_TRUE(overlay.RenameFile("/d/c", "/d/e").ok());
  ASSERT_TRUE(overlay.RenameFile("/d/a", "/d/f").ok()) << "a base file renamed";
  auto listed = overlay.ListDir("/d");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, (std::vector<std::string>{"e", "f"}));
  auto f = overlay.OpenFile("/d/f", false);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(ReadAll(**f), "base");
  EXPECT_EQ(overlay.ChangedPaths(),
            (std::vector<std::string>{"/d/a", "/d/b", "/d/c", "/d/e", "/d/f"}));
  auto lock1 = overlay.LockFile("/d/LOCK");
  auto lock2 = overlay.LockFile("/d/LOCK");
  EXPECT_TRUE(lock1.ok() && lock2.ok()) << "locks are left to the base directory's holder";

  // The base: same files, same bytes, nothing pending.
  auto base_listed = base.ListDir("/d");
  ASSERT_TRUE(base_listed.ok());
  std::sort(base_listed->begin(), base_listed->end());
  EXPECT_EQ(*base_listed, (std::vector<std::string>{"a", "b"}));
  for (const char* name : {"a", "b"}) {
    auto file = base.OpenFile(std::string("/d/") + name, false);
    ASSERT_TRUE(file.ok());
    EXPECT_EQ(ReadAll(**file), std::string("base-") + name);
  }
  EXPECT_EQ(base.PendingOperations(), 0u);
}

TEST(FaultInjectionEnvTest, FailsTheNthWriteAndSyncThenRecovers) {
  MemEnv mem;
  FaultInjectionEnv env(&mem);
  ASSERT_TRUE(env.CreateDir("/d").ok());
  auto f = env.OpenFile("/d/f", true);
  ASSERT_TRUE(f.ok());
  env.FailWrite(2);
  EXPECT_TRUE((*f)->WriteAt(0, std::string_view("one")).ok());
  Status s = (*f)->WriteAt(3, std::string_view("two"));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("Input/output error"), std::string_view::npos);
  EXPECT_TRUE((*f)->WriteAt(3, std::string_view("two")).ok()) << "one-shot fault";
  env.FailSync(1);
  EXPECT_EQ((*f)->Sync().code(), StatusCode::kIOError);
  EXPECT_TRUE((*f)->Sync().ok());
  EXPECT_EQ(env.injected_faults(), 2u);
}

TEST(FaultInjectionEnvTest, NoSpaceFailsWritesThatGrowTheFileUntilCleared) {
  MemEnv mem;
  FaultInjectionEnv env(&mem);
  ASSERT_TRUE(env.CreateDir("/d").ok());
  auto f = env.OpenFile("/d/f", true);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->WriteAt(0, std::string_view("....")).ok());
  env.SetNoSpace(true);
  EXPECT_TRUE((*f)->WriteAt(0, std::string_view("ab")).ok()) << "overwrites need no space";
  Status s = (*f)->WriteAt(2, std::string_view("cdefgh"));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(s.no_space());
  EXPECT_NE(s.message().find("No space left on device"), std::string_view::npos);
  EXPECT_EQ(ReadAll(**f), "abcd") << "the part within the old size landed";
  env.ClearFaults();
  EXPECT_TRUE((*f)->WriteAt(4, std::string_view("efgh")).ok());
  EXPECT_EQ(ReadAll(**f), "abcdefgh");
}

// A disk of a given size: growing writes take from it until it is full (the one that does not
// fit writes what fits and fails with NoSpace), overwrites take nothing, and removing,
// truncating or losing files in a crash gives their bytes back.
TEST(FaultInjectionEnvTest, SpaceLimitFailsWritesPastItUntilFilesGiveBytesBack) {
  MemEnv mem;
  FaultInjectionEnv env(&mem);
  ASSERT_TRUE(env.CreateDir("/d").ok());
  auto a = env.OpenFile("/d/a", true);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->WriteAt(0, std::string(40, 'a')).ok());
  ASSERT_TRUE((*a)->Sync().ok());
  env.SetSpaceLimit(100);
  EXPECT_EQ(env.SpaceUsed(), 40u);
  auto b = env.OpenFile("/d/b", true);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->WriteAt(0, std::string(50, 'b')).ok());
  EXPECT_EQ(env.SpaceUsed(), 90u);
  Status full = (*b)->WriteAt(50, std::string(20, 'c'));
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  EXPECT_TRUE(full.no_space());
  EXPECT_EQ(ReadAll(**b), std::string(50, 'b') + std::string(10, 'c')) << "what fits landed";
  EXPECT_EQ(env.SpaceUsed(), 100u);
  EXPECT_TRUE((*a)->WriteAt(0, std::string(40, 'A')).ok()) << "overwrites need no space";
  EXPECT_FALSE((*a)->WriteAt(40, std::string_view("x")).ok());
  ASSERT_TRUE(env.RemoveFile("/d/b").ok());
  EXPECT_EQ(env.SpaceUsed(), 40u);
  EXPECT_TRUE((*a)->WriteAt(40, std::string(60, 'x')).ok()) << "the removed file's bytes are free";
  ASSERT_TRUE((*a)->Truncate(70).ok());
  EXPECT_TRUE((*a)->WriteAt(70, std::string(30, 'y')).ok()) << "and the truncated ones";
  EXPECT_FALSE((*a)->WriteAt(100, std::string_view("z")).ok());
  // A renamed file is still counted; a crash takes back the unsynced growth of /d/a.
  ASSERT_TRUE(env.RenameFile("/d/a", "/d/c").ok());
  EXPECT_EQ(env.SpaceUsed(), 100u);
  mem.DropUnsyncedData();
  EXPECT_EQ(env.SpaceUsed(), 40u);
  env.ClearFaults();
  auto big = env.OpenFile("/d/big", true);
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE((*big)->WriteAt(0, std::string(1000, 'z')).ok()) << "no limit after ClearFaults";
}

// BeforeOpDo counts every operation that changes the disk, and PowerOff (from its action)
// stops them all, also those that need no open handle, until ClearFaults.
TEST(FaultInjectionEnvTest, BeforeOpDoCutsThePowerAtAChosenOperation) {
  MemEnv mem;
  FaultInjectionEnv env(&mem);
  const uint64_t before = env.ops();
  ASSERT_TRUE(env.CreateDir("/d").ok());
  auto f = env.OpenFile("/d/f", true);  // creates: counted
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(env.OpenFile("/d/f", true).ok());  // exists already: not counted
  ASSERT_TRUE((*f)->WriteAt(0, std::string_view("abc")).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  EXPECT_EQ(env.ops() - before, 4u);
  bool ran = false;
  env.BeforeOpDo(3, [&] {
    mem.DropUnsyncedData();
    env.PowerOff();
    ran = true;
  });
  ASSERT_TRUE((*f)->WriteAt(3, std::string_view("def")).ok());  // 1
  ASSERT_TRUE(env.SyncDir("/d").ok());                          // 2
  EXPECT_FALSE(ran);
  Status cut = env.RenameFile("/d/f", "/d/g");  // 3: the power goes before it
  EXPECT_TRUE(ran);
  EXPECT_EQ(cut.code(), StatusCode::kIOError);
  EXPECT_TRUE(mem.FileExists("/d/f")) << "nothing changes once the power is off";
  EXPECT_FALSE(env.RemoveFile("/d/f").ok());
  EXPECT_FALSE(env.SyncDir("/d").ok());
  EXPECT_TRUE(mem.FileExists("/d/f"));
  env.ClearFaults();
  auto reopened = env.OpenFile("/d/f", false);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(ReadAll(**reopened), "abc") << "the unsynced write died with the power";
  EXPECT_TRUE(env.RemoveFile("/d/f").ok()) << "powered on again";
}

TEST(FaultInjectionEnvTest, FaultsCanBeLimitedToSomeFiles) {
  MemEnv mem;
  FaultInjectionEnv env(&mem);
  ASSERT_TRUE(env.CreateDir("/d").ok());
  auto seg = env.OpenFile("/d/1.log", true);
  auto other = env.OpenFile("/d/1.log.prep", true);
  ASSERT_TRUE(seg.ok() && other.ok());
  env.SetFaultPathSuffix(".log");
  env.FailWrite(1);
  EXPECT_TRUE((*other)->WriteAt(0, std::string_view("x")).ok());
  EXPECT_FALSE((*seg)->WriteAt(0, std::string_view("x")).ok());
}

TEST(FaultInjectionEnvTest, FailsTheNthOpenOfTheChosenFiles) {
  MemEnv mem;
  FaultInjectionEnv env(&mem);
  ASSERT_TRUE(env.CreateDir("/d").ok());
  env.SetFaultPathSuffix(".log");
  env.FailOpen(2);
  EXPECT_TRUE(env.OpenFile("/d/1.log", true).ok());
  EXPECT_TRUE(env.OpenFile("/d/1.log.prep", true).ok()) << "not a chosen file";
  auto failed = env.OpenFile("/d/2.log", true);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
  EXPECT_EQ(failed.status().message(), "open '/d/2.log': Too many open files (injected)");
  EXPECT_FALSE(mem.FileExists("/d/2.log")) << "a failed open creates nothing";
  EXPECT_TRUE(env.OpenFile("/d/2.log", true).ok()) << "one-shot fault";
  EXPECT_EQ(env.injected_faults(), 1u);
}

TEST(RelativizePathsTest, PathsUnderTheRootBecomeRelativeToIt) {
  const std::string root = "/var/lib/runnel/data";
  EXPECT_EQ(RelativizePaths("open '/var/lib/runnel/data/00000000000000000002.log': Too many open "
                            "files",
                            root),
            "open '00000000000000000002.log': Too many open files");
  EXPECT_EQ(RelativizePaths("open directory '/var/lib/runnel/data': Too many open files", root),
            "open directory '.': Too many open files");
  EXPECT_EQ(RelativizePaths("data directory '/var/lib/runnel/data/' is in use", root),
            "data directory '.' is in use");
  EXPECT_EQ(RelativizePaths("/var/lib/runnel/data/a/b.tmp to /var/lib/runnel/data/a/b", root),
            "a/b.tmp to a/b");
  EXPECT_EQ(RelativizePaths("open '/var/lib/runnel/data/x': gone", root + "//"), "open 'x': gone");
  EXPECT_EQ(RelativizePaths("open './data/1.log': gone", "./data"), "open '1.log': gone");
  EXPECT_EQ(RelativizePaths("open '/1.log': gone", "/"), "open '1.log': gone");
}

TEST(RelativizePathsTest, TextThatIsNotAPathUnderTheRootIsKept) {
  const std::string root = "/srv/data";
  for (const std::string text : {"open '/srv/database/x': gone", "open '/srv/data-old/x': gone",
                                 "copy/srv/data/x", "open '/srv/dat': gone", "open 'x': gone"}) {
    EXPECT_EQ(RelativizePaths(text, root), text);
  }
  EXPECT_EQ(RelativizePaths("open '/srv/data/x'", ""), "open '/srv/data/x'");
}

TEST(RelativizePathsTest, AStatusKeepsItsCode) {
  EXPECT_TRUE(RelativizePaths(Status::OK(), "/d").ok());
  const Status io = RelativizePaths(Status::IOError("write '/d/1.log': No space left"), "/d");
  EXPECT_EQ(io.code(), StatusCode::kIOError);
  EXPECT_EQ(io.message(), "write '1.log': No space left");
  const Status conflict = RelativizePaths(Status::Conflict("at '/d/x'", 3, 4), "/d");
  EXPECT_EQ(conflict.message(), "at 'x'");
  EXPECT_EQ(conflict.conflict_expected(), 3u);
  EXPECT_EQ(conflict.conflict_actual(), 4u);
}

TEST(RelativeErrorsEnvTest, PosixErrorsNameFilesRelativeToTheRoot) {
  TempDir dir;
  RelativeErrorsEnv env(Env::Posix(), dir.path());
  auto missing = env.OpenFile(JoinPath(dir.path(), "00000000000000000002.log"), false);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "open '00000000000000000002.log': No such file or directory");
  EXPECT_EQ(env.SyncDir(JoinPath(dir.path(), "gone")).message(),
            "open directory 'gone': No such file or directory");
  auto lock = env.LockFile(JoinPath(dir.path(), "LOCK"));
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  auto again = env.LockFile(JoinPath(dir.path(), "LOCK"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(again.status().message().find(dir.path()), std::string_view::npos)
      << again.status().message();
  EXPECT_NE(again.status().message().find("'LOCK'"), std::string_view::npos)
      << again.status().message();
  // What succeeds is the base env's doing, paths as given.
  auto f = env.OpenFile(JoinPath(dir.path(), "a"), true);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->WriteAt(0, std::string_view("abc")).ok());
  EXPECT_EQ(ReadAll(**f), "abc");
  EXPECT_TRUE(Env::Posix()->FileExists(JoinPath(dir.path(), "a")));
  auto names = env.ListDir(dir.path());
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"LOCK", "a"}));
}

TEST(RelativeErrorsEnvTest, ErrorsOfItsFilesAreRelativeToo) {
  MemEnv mem;
  FaultInjectionEnv faults(&mem);
  RelativeErrorsEnv env(&faults, "/srv/data");
  ASSERT_TRUE(env.CreateDir("/srv/data").ok());
  auto f = env.OpenFile("/srv/data/00000000000000000001.log", true);
  ASSERT_TRUE(f.ok());
  faults.FailWrite(1);
  EXPECT_EQ((*f)->WriteAt(0, std::string_view("x")).message(),
            "write '00000000000000000001.log': Input/output error (injected)");
  faults.FailSync(1);
  EXPECT_EQ((*f)->Sync().message(),
            "fdatasync '00000000000000000001.log': Input/output error (injected)");
  faults.SetNoSpace(true);
  EXPECT_EQ((*f)->WriteAt(0, std::string_view("xyz")).message(),
            "write '00000000000000000001.log': No space left on device (injected)");
  faults.ClearFaults();
  faults.FailOpen(1);
  EXPECT_EQ(env.OpenFile("/srv/data/00000000000000000002.log", true).status().message(),
            "open '00000000000000000002.log': Too many open files (injected)");
}

}  // namespace
}  // namespace runnel::env
