// Tests of write_file_atomic and ensure_writable_dir: contents land whole or not at all, the
// temporary never stays behind, and failures name the path and the reason. Tests run as root,
// so failures are forced with a path under a regular file, not with permission bits.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "tests/common/files.hpp"
#include "tests/common/errors.hpp"

namespace fs = std::filesystem;

using dpx::testing::contains;
using dpx::testing::error_of;

using dpx::testing::file_text;

namespace {

// Every test's files go into its own TempDir (tests/common/files.hpp), tagged "atomic".
struct TempDir : dpx::testing::TempDir {
  TempDir() : dpx::testing::TempDir("atomic") {}
};

}  // namespace

TEST_CASE("write_file_atomic writes the contents and leaves only the file") {
  TempDir dir;
  const std::string path = dir.file("out.csv");
  dpx::write_file_atomic(path, std::string_view("a,b\n1,2\n"));
  CHECK(file_text(path) == "a,b\n1,2\n");

  const std::string big(300000, 'x');  // larger than the stream buffer: the direct-write path
  dpx::write_file_atomic(dir.file("big.bin"), [&](std::ostream& os) {
    os << "head";
    os.write(big.data(), static_cast<std::streamsize>(big.size()));
    os << "tail";
  });
  CHECK(file_text(dir.file("big.bin")) == "head" + big + "tail");
  CHECK(dir.entries() == std::vector<std::string>{"big.bin", "out.csv"});
}

TEST_CASE("write_file_atomic replaces an existing file") {
  TempDir dir;
  const std::string path = dir.file("summary.json");
  dpx::write_file_atomic(path, std::string_view("old"));
  dpx::write_file_atomic(path, std::string_view("new contents"));
  CHECK(file_text(path) == "new contents");
  dpx::write_file_atomic(path, std::string_view(""));
  CHECK(fs::file_size(path) == 0);
  CHECK(dir.entries() == std::vector<std::string>{"summary.json"});
}

TEST_CASE("a writer that throws leaves the old file as it was and no temporary") {
  TempDir dir;
  const std::string path = dir.file("trace.json");
  dpx::write_file_atomic(path, std::string_view("complete"));
  auto throwing = [](std::ostream& os) {
    os << "half of a new file";
    throw std::runtime_error("model diverged");
  };
  CHECK_THROWS_WITH_AS(dpx::write_file_atomic(path, throwing), "model diverged", std::runtime_error);
  CHECK(file_text(path) == "complete");
  CHECK(dir.entries() == std::vector<std::string>{"trace.json"});

  CHECK_THROWS_AS(dpx::write_file_atomic(dir.file("fresh.json"), throwing), std::runtime_error);
  CHECK(dir.entries() == std::vector<std::string>{"trace.json"});
}

TEST_CASE("a stream error set by the writer fails the write") {
  TempDir dir;
  const std::string path = dir.file("bad.csv");
  std::string msg = error_of([&] {
    dpx::write_file_atomic(path, [](std::ostream& os) {
      os << "x";
      os.setstate(std::ios::failbit);
    });
  });
  CHECK_MESSAGE(contains(msg, "cannot write " + path), msg);
  CHECK(dir.entries().empty());
}

TEST_CASE("write_file_atomic into a missing directory names the path and the reason") {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/steps.csv");
  std::string msg = error_of([&] { dpx::write_file_atomic(path, std::string_view("x")); });
  CHECK_MESSAGE(contains(msg, "cannot write " + path + " (--out): No such file or directory"), msg);
  CHECK_MESSAGE(contains(msg, "create the directory or pass another --out"), msg);
  CHECK(dir.entries().empty());
}

TEST_CASE("write_file_atomic under a regular file fails and creates nothing") {
  TempDir dir;
  dpx::write_file_atomic(dir.file("plain"), std::string_view("i am a file"));
  const std::string path = dir.file("plain/out.csv");
  std::string msg = error_of([&] { dpx::write_file_atomic(path, std::string_view("x")); });
  CHECK_MESSAGE(contains(msg, "cannot write " + path + " (--out): Not a directory"), msg);
  CHECK(dir.entries() == std::vector<std::string>{"plain"});
  CHECK(file_text(dir.file("plain")) == "i am a file");
}

TEST_CASE("write_file_atomic onto a directory fails at the rename and removes the temporary") {
  TempDir dir;
  fs::create_directory(dir.file("results"));
  std::string msg = error_of([&] { dpx::write_file_atomic(dir.file("results"), std::string_view("x")); });
  CHECK_MESSAGE(contains(msg, "cannot write " + dir.file("results") + " (--out): Is a directory"), msg);
  CHECK(dir.entries() == std::vector<std::string>{"results"});
  CHECK(fs::is_empty(dir.file("results")));
}

TEST_CASE("a failing write (file size limit) is reported and leaves no partial file") {
  TempDir dir;
  const std::string path = dir.file("weights.bin");
  dpx::write_file_atomic(path, std::string_view("previous"));
  // RLIMIT_FSIZE makes write() fail with EFBIG as a full disk would with ENOSPC; SIGXFSZ is
  // ignored so the process survives. Both are restored whatever happens.
  rlimit old_limit{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  struct sigaction ignore {}, old_action {};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGXFSZ, &ignore, &old_action) == 0);
  rlimit small = old_limit;
  small.rlim_cur = 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string payload(1 << 20, 'w');
  std::string msg = error_of([&] { dpx::write_file_atomic(path, std::string_view(payload)); });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::sigaction(SIGXFSZ, &old_action, nullptr);

  CHECK_MESSAGE(contains(msg, "cannot write " + path + " (--out): File too large"), msg);
  CHECK_MESSAGE(contains(msg, "free some disk space"), msg);
  CHECK(file_text(path) == "previous");
  CHECK(dir.entries() == std::vector<std::string>{"weights.bin"});
}

TEST_CASE("write_file_atomic refuses an empty path") {
  CHECK_MESSAGE(contains(error_of([] { dpx::write_file_atomic("", std::string_view("x")); }), "empty path"),
                "no error for an empty path");
}

TEST_CASE("ensure_writable_dir creates missing directories and accepts existing ones") {
  TempDir dir;
  const std::string out = dir.file("runs/resnet50/2024");
  dpx::ensure_writable_dir(out);
  CHECK(fs::is_directory(out));
  dpx::ensure_writable_dir(out);  // again: nothing to do, no error
  dpx::write_file_atomic(out + "/steps.csv", std::string_view("step\n"));
  CHECK(file_text(out + "/steps.csv") == "step\n");
  CHECK_NOTHROW(dpx::ensure_writable_dir(""));  // the current directory
}

TEST_CASE("ensure_writable_dir fails clearly where a file is in the way") {
  TempDir dir;
  dpx::write_file_atomic(dir.file("plain"), std::string_view("x"));

  std::string msg = error_of([&] { dpx::ensure_writable_dir(dir.file("plain")); });
  CHECK_MESSAGE(contains(msg, dir.file("plain") + " as an output directory (--out): it exists and is not a directory"), msg);

  msg = error_of([&] { dpx::ensure_writable_dir(dir.file("plain/sub/dir")); });
  CHECK_MESSAGE(contains(msg, "cannot create directory " + dir.file("plain/sub/dir") + " (--out): Not a directory"), msg);
  CHECK(dir.entries() == std::vector<std::string>{"plain"});
}

TEST_CASE("errors name the flag that chose the path") {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/w.safetensors");
  std::string msg = error_of([&] { dpx::write_file_atomic(path, std::string_view("x"), "--save"); });
  CHECK_MESSAGE(contains(msg, "cannot write " + path + " (--save): No such file or directory; create the directory or "
                              "pass another --save"), msg);
  dpx::write_file_atomic(dir.file("plain"), std::string_view("x"));
  msg = error_of([&] { dpx::ensure_writable_dir(dir.file("plain"), "--checkpoint-dir"); });
  CHECK_MESSAGE(contains(msg, "(--checkpoint-dir): it exists and is not a directory; pass another --checkpoint-dir"),
                msg);
}

TEST_CASE("while a file is written nothing but a marked temporary can be seen; a signal's handler removes it") {
  TempDir dir;
  std::string seen_while_writing;
  dpx::write_file_atomic(dir.file("steps.csv"), [&](std::ostream& os) {
    os << "step\n";
    for (const auto& e : dir.entries()) seen_while_writing += e + ";";
    dpx::remove_temporaries_in_progress();  // what the handler of a second SIGTERM does
  });
  // An unnamed file (O_TMPFILE) where the file system has them: nothing to see, nothing to leave
  // (the write goes on and lands whole); else a ".steps.csv.dpx-tmp.PID.RANDOM" the handler removed.
  CHECK((seen_while_writing.empty() ||
         seen_while_writing.find(".steps.csv.dpx-tmp." + std::to_string(getpid()) + ".") == 0));
  CHECK(dir.entries() == std::vector<std::string>{"steps.csv"});
}

namespace {
// A dead process's pid: a child that has ended.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  waitpid(child, nullptr, 0);
  return child;
}
void write_raw(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
}  // namespace

TEST_CASE("the next run removes only the temporaries dpx can prove it made: its naming and its mark") {
  TempDir dir;
  const std::string pid = std::to_string(dead_pid());
  const std::string dead = dir.file(".steps.csv.dpx-tmp." + pid + ".0123456789abcdef");
  write_raw(dead, "partial");
  const bool marks = ::setxattr(dead.c_str(), "user.dpx.temporary", pid.data(), pid.size(), 0) == 0;
  // Look-alikes that are not dpx's: the old naming, the new naming without the mark or with
  // another pid's, a link under the new naming, a live process's, and a user's own file.
  const std::string old_style = dir.file("steps.csv.tmp." + pid + ".3");
  const std::string unmarked = dir.file(".runs.csv.dpx-tmp." + pid + ".fedcba9876543210");
  const std::string other_mark = dir.file(".ops.csv.dpx-tmp." + pid + ".00000000000000aa");
  const std::string alive = dir.file(".summary.csv.dpx-tmp.1.0123456789abcdef");  // pid 1 lives on
  const std::string user = dir.file("notes.tmp.txt");
  for (const auto& p : {old_style, unmarked, other_mark, alive, user}) write_raw(p, "mine");
  (void)::setxattr(other_mark.c_str(), "user.dpx.temporary", "1", 1, 0);
  (void)::setxattr(alive.c_str(), "user.dpx.temporary", "1", 1, 0);
  const std::string target = dir.file("precious.bin");
  write_raw(target, "precious");
  const std::string link = dir.file(".w.safetensors.dpx-tmp." + pid + ".0000000000000001");
  fs::create_symlink(target, link);
  dpx::ensure_writable_dir(dir.path.string());  // what every run does with its output folders
  if (marks) CHECK(!fs::exists(dead));
  else MESSAGE("this file system keeps no user.* extended attributes: no temporary can be proven dpx's, none removed");
  for (const auto& p : {old_style, unmarked, other_mark, alive, user, target}) {
    CAPTURE(p);
    CHECK(file_text(p) == (p == target ? "precious" : "mine"));
  }
  CHECK(fs::is_symlink(link));
  CHECK(dpx::remove_stale_temporaries(dir.path.string()) == 0);
}

TEST_CASE("write_file_atomic replaces a link at the path, never its target, and marks nothing it leaves") {
  TempDir dir;
  const std::string target = dir.file("users-file.txt"), link = dir.file("out.csv");
  write_raw(target, "the user's");
  fs::create_symlink(target, link);
  dpx::write_file_atomic(link, std::string_view("dpx's\n"));
  CHECK(file_text(target) == "the user's");
  CHECK(!fs::is_symlink(link));
  CHECK(file_text(link) == "dpx's\n");
  char buf[32];
  CHECK(::getxattr(link.c_str(), "user.dpx.temporary", buf, sizeof buf) < 0);  // the mark was taken off
}

TEST_CASE("the lock file is never followed through a link, truncated, or taken from a file that is not dpx's") {
  TempDir dir;
  const std::string target = dir.file("precious.txt");
  write_raw(target, "a user's file, much longer than any pid");
  fs::create_directories(dir.file("a"));
  fs::create_symlink(target, dir.file("a/.dpx.lock"));
  std::string msg = error_of([&] { dpx::OutputLock lock(dir.file("a"), "--out"); });
  CHECK_MESSAGE(contains(msg, "is a symbolic link, not dpx's lock file (--out)"), msg);
  CHECK(file_text(target) == "a user's file, much longer than any pid");
  fs::create_directories(dir.file("b"));
  write_raw(dir.file("b/.dpx.lock"), "my notes, not a pid\n");
  msg = error_of([&] { dpx::OutputLock lock(dir.file("b"), "--out"); });
  CHECK_MESSAGE(contains(msg, "exists and is not a dpx lock file (--out)"), msg);
  CHECK(file_text(dir.file("b/.dpx.lock")) == "my notes, not a pid\n");
  // A lock an older dpx left (its pid, unpadded) is dpx's: taken, and written over in place.
  fs::create_directories(dir.file("c"));
  write_raw(dir.file("c/.dpx.lock"), "12345");
  { dpx::OutputLock lock(dir.file("c"), "--out"); }
  CHECK(file_text(dir.file("c/.dpx.lock")).rfind(std::to_string(getpid()) + " ", 0) == 0);
}

TEST_CASE("an output folder takes one writer at a time") {
  TempDir dir;
  {
    dpx::OutputLock first(dir.path.string(), "--out");
    std::string msg;
    try {
      dpx::OutputLock second(dir.path.string(), "--out");
    } catch (const dpx::UsageError& e) {
      msg = e.what();
    }
    CHECK_MESSAGE(contains(msg, "another dpx run (pid " + std::to_string(getpid()) + ") is writing into " +
                                    dir.path.string() + " (--out): wait for it to end, or pass another --out"),
                  msg);
  }
  CHECK_NOTHROW(dpx::OutputLock(dir.path.string(), "--out"));  // released with the first
}
