// `tqserve serve` as a process: the listening line names the real port
// (--port 0), /health turns 200 once the model is loaded, an idle daemon uses
// no CPU, SIGTERM exits 0; bad input exits with the documented codes.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tq::http {
namespace {

using Clock = std::chrono::steady_clock;

// A child `tqserve serve ...` with its stderr on a pipe; killed if still alive.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> args) {
    args.insert(args.begin(), {TQ_BINARY, "serve"});
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    err_fd_ = fds[0];
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (err_fd_ >= 0) close(err_fd_);
  }

  // Reads stderr until `pattern` matches (returns the match) or `timeout`.
  std::smatch WaitForStderr(const std::regex& pattern, std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::smatch match;
    while (!std::regex_search(err_, match, pattern) && Clock::now() < deadline) {
      pollfd p{err_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = read(err_fd_, buf, sizeof(buf));
        if (n <= 0) break;  // the child closed stderr (exited)
        err_.append(buf, static_cast<size_t>(n));
      }
    }
    return match;
  }
  // Exit status, or -1 when it does not exit within `timeout`.
  int WaitExit(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  // CPU seconds (user + system) the process has used, from /proc/PID/stat.
  double CpuSeconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "(comm) "
    std::string f;
    long ticks = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {
      if (i == 14 || i == 15) ticks += std::stol(f);  // utime, stime
    }
    return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

  pid_t pid() const { return pid_; }
  const std::string& err() const { return err_; }

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  bool exited_ = false;
  std::string err_;
};

const std::regex kListening(R"(tqserve: listening on http://0\.0\.0\.0:(\d+)\n)");

TEST(ServeProcess, ListensLoadsIdlesQuietlyAndExitsZeroOnSigterm) {
  // --grpc-port 0: no gRPC server, whose default port parallel tests would share.
  ServeProcess serve({"--model", std::string(TQ_MODEL_DIR) + "/", "--port", "0", "--grpc-port", "0",
                      "--kv-cache-dtype", "fp16", "--max-num-seqs", "4"});
  const std::smatch m = serve.WaitForStderr(kListening, std::chrono::seconds(60));
  ASSERT_FALSE(m.empty()) << serve.err();
  const int port = std::stoi(m[1]);
  ASSERT_GT(port, 0);

  httplib::Client client("127.0.0.1", port);
  int health = 0;
  for (int i = 0; i < 600 && health != 200; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (auto res = client.Get("/health")) health = res->status;
  }
  ASSERT_EQ(health, 200) << serve.err();
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  // The served name defaults to the model directory's name (a trailing "/" too).
  EXPECT_EQ(nlohmann::json::parse(models->body)["data"][0]["id"], "stories260K");

  // Idle: no thread may poll or spin (waits must block).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double before = serve.CpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(serve.CpuSeconds() - before, 0.1) << "CPU seconds used in 1 s of idling";

  ASSERT_EQ(kill(serve.pid(), SIGTERM), 0);
  EXPECT_EQ(serve.WaitExit(std::chrono::seconds(30)), 0) << serve.err();
}

TEST(ServeProcess, MissingModelDirectoryExitsOneBeforeListening) {
  ServeProcess serve({"--model", "/nonexistent/model", "--port", "0", "--grpc-port", "0"});
  EXPECT_EQ(serve.WaitExit(std::chrono::seconds(30)), 1);
  serve.WaitForStderr(std::regex("\n$"), std::chrono::seconds(5));
  EXPECT_NE(serve.err().find("tqserve: error: "), std::string::npos) << serve.err();
  EXPECT_EQ(serve.err().find("listening"), std::string::npos) << serve.err();
}

TEST(ServeProcess, PortInUseExitsOne) {
  // Hold a listening socket on a free port, then ask tqserve for it.
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(sock, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  ServeProcess serve({"--model", TQ_MODEL_DIR, "--port", port, "--grpc-port", "0"});
  EXPECT_EQ(serve.WaitExit(std::chrono::seconds(30)), 1);
  close(sock);
  serve.WaitForStderr(std::regex("--port"), std::chrono::seconds(5));
  EXPECT_NE(serve.err().find("--port " + port), std::string::npos) << serve.err();
}

TEST(ServeProcess, BadFlagsAndConfigKeysExitTwo) {
  ServeProcess range({"--model", TQ_MODEL_DIR, "--port", "70000"});
  EXPECT_EQ(range.WaitExit(std::chrono::seconds(30)), 2);

  const std::string config = ::testing::TempDir() + "/tqserve_bad_config.toml";
  std::ofstream(config) << "port = 0\nno_such_flag = 1\n";
  ServeProcess unknown({"--model", TQ_MODEL_DIR, "--config", config});
  EXPECT_EQ(unknown.WaitExit(std::chrono::seconds(30)), 2);
  unknown.WaitForStderr(std::regex("no_such_flag"), std::chrono::seconds(5));
  EXPECT_NE(unknown.err().find("no_such_flag"), std::string::npos) << unknown.err();
}

}  // namespace
}  // namespace tq::http
