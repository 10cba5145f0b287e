// ObjectServer: tests/integration/http_object_server.py as a child process
// for unit tests of remote reads (loopback, a free port); killed and reaped
// at destruction. Not thread-safe (a test's main thread uses it).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "catch2/catch.hpp"

extern char** environ;

namespace conveyor::testing {

class ObjectServer {
 public:
  ObjectServer(const std::string& root, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        CONVEYOR_PYTHON,
        std::string(CONVEYOR_SOURCE_DIR) + "/tests/integration/http_object_server.py", "--root",
        root};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    REQUIRE(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[64];
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    INFO(line);
    REQUIRE(line.rfind("PORT ", 0) == 0);
    port_ = std::stoi(line.substr(5));
  }
  ~ObjectServer() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace conveyor::testing
