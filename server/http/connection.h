// One HTTP/1.1 connection of the event-driven server: a state machine on an
// Asio strand (Boost.Beast parses and serializes; no thread per connection).
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/http/http_message.h"
#include "server/http/server_state.h"

namespace tq::http {

class Connection;

/// What a connection needs from its server. Thread-safe.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  /// Routes a request; `done` gets the response, on any thread (the
  /// connection posts it back to its strand).
  virtual void Handle(HttpRequest&& request, std::function<void(HttpResponse&&)> done) = 0;
  /// Checks a request's head before its body is read (the request guards,
  /// server/guard/http_guard.h); a response refuses it (the connection
  /// closes after it, the body unread).
  virtual std::optional<HttpResponse> CheckHead(const HttpRequest& head) = 0;
  /// A response was written completely (counting and the request log).
  virtual void OnResponseWritten(const HttpRequest& request, int status) = 0;
  /// The connection closed (it calls this once, from its strand).
  virtual void OnClosed(Connection* connection) = 0;
  virtual const HttpOptions& options() const = 0;
  virtual bool draining() const = 0;
};

/// Serves one TCP connection per RFC 9112: keep-alive, pipelined requests
/// answered in order (one at a time; later ones wait in the socket),
/// Content-Length and chunked request bodies (Beast's parser), `Expect:
/// 100-continue`, gzip/deflate request bodies, streamed (chunked SSE) and
/// whole responses.
///
/// Timeouts are timers, not threads: the whole request head and body must
/// arrive within options.read_timeout_s of its first byte (a client
/// trickling bytes is closed then); an idle keep-alive connection is closed
/// after options.keep_alive_timeout_s (the first request of a connection
/// gets read_timeout_s); a write that makes no progress for
/// options.write_timeout_s (a client that stopped reading) aborts the request
/// and closes. While a response is produced the connection watches the socket:
/// EOF or a reset aborts the request (its KV blocks are freed in the
/// engine's next step).
///
/// TLS (a non-null context): the handshake goes first and must finish within
/// options.read_timeout_s of the accept (a client that never handshakes is
/// closed then); a plaintext HTTP request instead of a ClientHello gets a
/// plaintext 400 and the close. Every later read and write goes through the
/// TLS stream; while a response is produced the connection watches the peer
/// by reading through TLS (raw readiness says nothing there: a close_notify
/// is bytes too), so EOF, close_notify or a reset abort the request as in
/// plaintext.
///
/// Threads: everything runs on the connection's strand; the engine thread
/// only calls the deferred body's wake, which posts here.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  /// `tls` null: plaintext HTTP; otherwise the server's TLS context, which
  /// must outlive the connection.
  Connection(boost::asio::ip::tcp::socket socket, ConnectionHost* host,
             boost::asio::ssl::context* tls);
  ~Connection();

  /// Starts reading (call once, after construction via std::make_shared).
  void Start();
  /// From any thread (the drain): an idle connection closes after a short
  /// grace (a request already on the wire is still answered, 503); one with
  /// a response under way closes after it; one still receiving a request
  /// head keeps its deadline.
  void CloseIfIdle();
  /// From any thread: closes now, aborting a response under way.
  void CloseNow();

 private:
  enum class State { kHandshake, kIdle, kReading, kHandling, kResponding, kClosed };

  // Calls f(stream) with the TLS stream or the plain socket (the one the
  // HTTP bytes go through).
  template <typename F>
  void WithStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(socket_);
    }
  }

  void Handshake();
  void OnHandshake(boost::beast::error_code ec);
  void AnswerPlaintextOnTls();
  void NextRequest();
  void ArmReadTimer(double seconds);
  void ReadHeader();
  void OnHeader(boost::beast::error_code ec);
  void ReadBody();
  void OnBody(boost::beast::error_code ec);
  void WatchPeer();
  void OnPeerReadable(boost::beast::error_code ec, uint64_t seq);
  void OnTlsPeerRead(boost::beast::error_code ec, size_t bytes, uint64_t seq);
  void OnResponse(HttpResponse&& response);
  void WriteWhole(HttpResponse&& response);
  void WriteStreamHeader();
  void Pump();
  void StartWriteTimer();
  void OnWritten(boost::beast::error_code ec, bool last);
  void FinishResponse();
  void RefuseAndClose(int status, const std::string& message);
  void RefuseAndClose(HttpResponse&& response);
  void PeerGone(const char* why);
  void Close();

  boost::asio::ip::tcp::socket socket_;
  // TLS over socket_ (declared after it: destroyed first); empty: plaintext.
  std::optional<boost::beast::ssl_stream<boost::asio::ip::tcp::socket&>> tls_;
  ConnectionHost* const host_;
  boost::asio::steady_timer read_timer_;
  boost::asio::steady_timer write_timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  State state_ = State::kIdle;
  bool first_request_ = true;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  HttpRequest request_;  // the request being answered (method, path for the log)
  // Watching the socket while a response is produced: one async_wait at a
  // time; seq tells a stale completion (after a cancel) from the live one.
  bool watching_ = false;
  uint64_t watch_seq_ = 0;
  bool pipelined_ = false;  // the peer sent more bytes (the next request)
  // The response under way.
  std::unique_ptr<DeferredBody> deferred_;
  std::vector<std::pair<std::string, std::string>> deferred_headers_;  // the handler's, until sent
  int status_ = 0;
  bool writing_ = false;
  bool body_done_ = false;  // Pull returned true: the last chunk goes next
  std::string out_;         // bytes of the write in flight
  std::optional<boost::beast::http::response<boost::beast::http::string_body>> whole_;
  std::optional<boost::beast::http::response<boost::beast::http::empty_body>> stream_head_;
  std::optional<boost::beast::http::response_serializer<boost::beast::http::empty_body>>
      stream_head_sr_;
  std::atomic<bool> wake_posted_{false};
  bool close_after_response_ = false;
};

}  // namespace tq::http
