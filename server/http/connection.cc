// One HTTP/1.1 connection (see connection.h).
#include "server/http/connection.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>

#include "server/guard/http_guard.h"
#include "server/guard/log_field.h"
#include "server/http/content_encoding.h"
#include "server/http/json_fields.h"
#include "server/http/openai_errors.h"

namespace tq::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

constexpr size_t kHeaderLimit = 64 << 10;    // request line + headers
constexpr int kSendBufferBytes = 256 << 10;  // SO_SNDBUF of every connection
constexpr double kDrainIdleSeconds = 0.2;    // idle keep-alive left once draining
constexpr size_t kWatchReadBytes = 4096;     // TLS: one read while watching the peer

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

std::string ErrorBody(int status, const std::string& message) {
  ApiError error;
  error.status = status;
  error.message = message;
  return DumpJson(ErrorJson(error));
}

// A read that failed because the connection ended or failed (closed
// cleanly or not, reset, cancelled, any TLS error): closed without an answer.
bool ConnectionEnded(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::operation_aborted ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::ssl::error::stream_truncated ||
         ec.category() == asio::error::get_ssl_category();
}

// The head alone (no body): request line and fields, for the request guards
// and the handler.
template <typename Fields>
HttpRequest HeadOf(const bhttp::request_header<Fields>& head) {
  HttpRequest view;
  view.method = std::string(head.method_string());
  view.target = std::string(head.target());
  guard::RequestTarget target = guard::ParseRequestTarget(view.target);
  view.path = std::move(target.path);
  view.authority = std::move(target.authority);
  view.version = static_cast<int>(head.version());
  for (const auto& field : head) {
    view.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return view;
}

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, ConnectionHost* host, asio::ssl::context* tls)
    : socket_(std::move(socket)),
      host_(host),
      read_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()) {
  if (tls != nullptr) tls_.emplace(socket_, *tls);
}

Connection::~Connection() = default;

void Connection::Start() {
  boost::system::error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);  // SSE events go out at once
  // A fixed send buffer: a reader that stops reading holds at most this much
  // kernel memory (autotuning grows to tcp_wmem's 4 MiB each, 40 GiB for
  // 10,000 connections) and its stall is seen sooner.
  socket_.set_option(asio::socket_base::send_buffer_size(kSendBufferBytes), ec);
  const auto remote = socket_.remote_endpoint(ec);
  if (!ec) {
    request_.remote_addr = remote.address().to_string();
    request_.remote_port = remote.port();
  }
  if (tls_) {
    Handshake();
  } else {
    NextRequest();
  }
}

void Connection::Handshake() {
  state_ = State::kHandshake;
  ArmReadTimer(host_->options().read_timeout_s);  // a client that never says hello is closed
  tls_->async_handshake(
      asio::ssl::stream_base::server,
      [self = shared_from_this()](beast::error_code ec) { self->OnHandshake(ec); });
}

void Connection::OnHandshake(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (!ec) {
    NextRequest();  // the first request gets its own read_timeout_s
    return;
  }
  if (ec.category() == asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_HTTP_REQUEST) {
    AnswerPlaintextOnTls();
    return;
  }
  spdlog::debug("{}:{}: TLS handshake failed: {}", request_.remote_addr, request_.remote_port,
                ec.message());
  Close();
}

void Connection::AnswerPlaintextOnTls() {
  // OpenSSL saw "GET ", "POST" ... where a ClientHello belongs: say so in
  // plaintext (written without waiting, as the --max-connections refusal),
  // then close. The request is not read further.
  const std::string body =
      ErrorBody(400, "this port speaks HTTPS (--ssl-certfile): the request was plain HTTP");
  const std::string reply =
      "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: "
      "close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  beast::error_code ignored;
  socket_.non_blocking(true, ignored);
  socket_.write_some(asio::buffer(reply), ignored);
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  spdlog::debug("{}:{}: plain HTTP on the TLS port; answered 400", request_.remote_addr,
                request_.remote_port);
  Close();
}

void Connection::CloseIfIdle() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->state_ == State::kIdle) {
      // Not at once: a request may be on the wire already (RFC 9112 9.6: a
      // close racing a request). Idle for kDrainIdleSeconds more, it closes;
      // a request arriving meanwhile gets its 503 with Connection: close.
      self->ArmReadTimer(kDrainIdleSeconds);
    } else if (self->state_ != State::kReading) {
      // Reading: the request deadline ends a trickling client; Stop the rest.
      self->close_after_response_ = true;
    }
  });
}

void Connection::CloseNow() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->deferred_) self->deferred_->Abort("the server is stopping");
    self->Close();
  });
}

void Connection::ArmReadTimer(double seconds) {
  read_timer_.expires_after(Seconds(seconds));
  read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return;  // cancelled: the request arrived in time
    if (self->state_ == State::kIdle || self->state_ == State::kReading ||
        self->state_ == State::kHandshake) {
      spdlog::debug("{}:{}: closed: {}", self->request_.remote_addr, self->request_.remote_port,
                    self->state_ == State::kIdle      ? "idle keep-alive timeout"
                    : self->state_ == State::kReading ? "request head/body deadline"
                                                      : "TLS handshake deadline");
      self->Close();
    }
  });
}

void Connection::NextRequest() {
  if (state_ == State::kClosed) return;
  const bool first = std::exchange(first_request_, false);
  if (!first && (host_->draining() || close_after_response_)) {
    Close();  // a new connection while draining still gets its answer (503)
    return;
  }
  state_ = State::kIdle;
  parser_.reset();
  deferred_.reset();
  if ((buffer_.size() > 0 || pipelined_) && !(tls_ && watching_)) {
    // The next request is here already (pipelined): read it now. (TLS: a
    // watch read in flight never coexists with buffered bytes, as it starts
    // only on an empty buffer and its bytes end it.)
    if (watching_) {
      ++watch_seq_;
      watching_ = false;
      beast::error_code ignored;
      socket_.cancel(ignored);
    }
    ReadHeader();
    return;
  }
  const HttpOptions& o = host_->options();
  ArmReadTimer(first ? o.read_timeout_s : o.keep_alive_timeout_s);
  if (watching_) return;  // the wait under way becomes the wait for the next request
  WatchPeer();
}

void Connection::WatchPeer() {
  watching_ = true;
  const uint64_t seq = ++watch_seq_;
  if (tls_) {
    // Through TLS the socket's readiness says nothing (OpenSSL may hold a
    // decrypted record; an alert is bytes too): read one record instead. Its
    // bytes are the next request, kept in buffer_ for the parser.
    tls_->async_read_some(buffer_.prepare(kWatchReadBytes),
                          [self = shared_from_this(), seq](beast::error_code ec, size_t n) {
                            self->OnTlsPeerRead(ec, n, seq);
                          });
    return;
  }
  socket_.async_wait(
      asio::socket_base::wait_read,
      [self = shared_from_this(), seq](beast::error_code ec) { self->OnPeerReadable(ec, seq); });
}

void Connection::OnPeerReadable(beast::error_code ec, uint64_t seq) {
  if (seq != watch_seq_ || state_ == State::kClosed) return;  // stale (cancelled)
  watching_ = false;
  if (ec) {
    PeerGone("connection error");
    return;
  }
  if (state_ == State::kIdle) {
    ReadHeader();  // the first bytes of a request (or EOF, which the read reports)
    return;
  }
  // A response is under way: EOF/RST means the client left; data is the next
  // pipelined request, read once this response is done.
  char byte = 0;
  const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    PeerGone("client closed the connection");
  } else if (n > 0) {
    pipelined_ = true;
  } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    WatchPeer();
  } else {
    PeerGone("connection reset");
  }
}

void Connection::OnTlsPeerRead(beast::error_code ec, size_t bytes, uint64_t seq) {
  if (seq != watch_seq_ || state_ == State::kClosed) return;
  watching_ = false;
  buffer_.commit(bytes);
  if (ec) {
    // eof: close_notify; stream_truncated: TCP closed without one.
    PeerGone(ec == asio::error::eof || ec == asio::ssl::error::stream_truncated
                 ? "client closed the connection"
                 : "connection error");
    return;
  }
  if (state_ == State::kIdle) {
    ReadHeader();
  } else {
    pipelined_ = true;  // read once this response is done
  }
}

void Connection::ReadHeader() {
  state_ = State::kReading;
  pipelined_ = false;
  ArmReadTimer(host_->options().read_timeout_s);  // the whole head and body, not per byte
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(host_->options().max_body_bytes);
  WithStream([this](auto& stream) {
    bhttp::async_read_header(
        stream, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  });
}

void Connection::OnHeader(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (ec) {
    if (ConnectionEnded(ec)) {
      Close();
    } else if (ec == bhttp::error::header_limit) {
      RefuseAndClose(431, "request headers too large");
    } else if (ec == bhttp::error::body_limit) {
      // Its Content-Length says so: the guards refuse (and count) it, from
      // the fields read so far.
      if (std::optional<HttpResponse> refusal = host_->CheckHead(HeadOf(parser_->get()))) {
        RefuseAndClose(std::move(*refusal));
      } else {
        RefuseAndClose(413, "request body too large");
      }
    } else {
      RefuseAndClose(400, "malformed HTTP request: " + ec.message());
    }
    return;
  }
  const auto& head = parser_->get();
  if (!guard::ParseRequestTarget({head.target().data(), head.target().size()}).valid) {
    RefuseAndClose(400,
                   "the absolute-form request-target has no host[:port] authority (RFC 9112 "
                   "section 3.2.2)");
    return;
  }
  if (std::optional<HttpResponse> refusal = host_->CheckHead(HeadOf(head))) {
    RefuseAndClose(std::move(*refusal));
    return;
  }
  const auto length = parser_->content_length();
  if (length && *length > host_->options().max_body_bytes) {
    RefuseAndClose(413, "request body too large");
    return;
  }
  if (beast::iequals(head[bhttp::field::expect], "100-continue") && !parser_->is_done()) {
    // RFC 9110 10.1.1: tell the client to send the body.
    auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                     head.version());
    WithStream([this, &cont](auto& stream) {
      bhttp::async_write(stream, *cont,
                         [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                           if (wec) {
                             self->Close();
                           } else {
                             self->ReadBody();
                           }
                         });
    });
    return;
  }
  ReadBody();
}

void Connection::ReadBody() {
  WithStream([this](auto& stream) {
    bhttp::async_read(
        stream, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
  });
}

void Connection::OnBody(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (ec) {
    if (ec == bhttp::error::body_limit) {
      RefuseAndClose(413, "request body too large");
    } else if (ConnectionEnded(ec)) {
      Close();
    } else {
      RefuseAndClose(400, "malformed HTTP request body: " + ec.message());
    }
    return;
  }
  read_timer_.cancel();
  auto& msg = parser_->get();
  keep_alive_ = msg.keep_alive();
  version_ = msg.version();
  HttpRequest request = HeadOf(msg.base());
  request.body = std::move(msg.body());
  request.remote_addr = request_.remote_addr;
  request.remote_port = request_.remote_port;
  parser_.reset();
  switch (DecodeContentEncoding(request.header("Content-Encoding").value_or(""),
                                host_->options().max_body_bytes, &request.body)) {
    case DecodeResult::kOk:
      break;
    case DecodeResult::kUnsupported:
      RefuseAndClose(415, "unsupported Content-Encoding (supported: gzip, deflate, identity)");
      return;
    case DecodeResult::kCorrupt:
      RefuseAndClose(400, "the request body is not valid for its Content-Encoding");
      return;
    case DecodeResult::kTooLarge:
      RefuseAndClose(413, "request body too large (decompressed)");
      return;
  }
  request_ = request;  // kept for the log line (the handler gets the body)
  request_.body.clear();
  state_ = State::kHandling;
  // TLS: bytes already buffered (a pipelined request) stop the watch; the
  // read that would watch needs an empty buffer (see NextRequest).
  if (!watching_ && !(tls_ && buffer_.size() > 0)) WatchPeer();
  host_->Handle(std::move(request), [self = shared_from_this()](HttpResponse&& response) {
    asio::post(self->socket_.get_executor(),
               [self, r = std::make_shared<HttpResponse>(std::move(response))]() mutable {
                 self->OnResponse(std::move(*r));
               });
  });
}

void Connection::OnResponse(HttpResponse&& response) {
  if (state_ != State::kHandling) {
    // The client left while the request was being handled.
    if (response.deferred) response.deferred->Abort("client gone");
    return;
  }
  state_ = State::kResponding;
  status_ = response.status;
  if (response.deferred && !response.deferred->streamed()) status_ = 499;  // until it is complete
  if (!response.deferred) {
    WriteWhole(std::move(response));
    return;
  }
  deferred_ = std::move(response.deferred);
  // The handler's headers (CORS, say) also go on the deferred response.
  deferred_headers_ = std::move(response.headers);
  std::weak_ptr<Connection> weak = weak_from_this();
  const auto executor = socket_.get_executor();
  deferred_->Start([weak, executor, this] {
    // The engine thread: post at most one wake-up until it ran.
    auto self = weak.lock();
    if (!self || wake_posted_.exchange(true)) return;
    asio::post(executor, [self] {
      self->wake_posted_ = false;
      self->Pump();
    });
  });
  if (deferred_->streamed()) {
    WriteStreamHeader();
  } else {
    Pump();
  }
}

void Connection::WriteWhole(HttpResponse&& response) {
  whole_.emplace(static_cast<bhttp::status>(response.status), version_);
  auto& res = *whole_;
  res.set(bhttp::field::content_type, response.content_type);
  for (auto& [name, value] : response.headers) res.insert(name, value);
  res.body() = std::move(response.body);
  res.keep_alive(keep_alive_ && !host_->draining() && !close_after_response_);
  res.prepare_payload();
  writing_ = true;
  StartWriteTimer();
  WithStream([this, &res](auto& stream) {
    bhttp::async_write(stream, res, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->OnWritten(ec, /*last=*/true);
    });
  });
}

void Connection::WriteStreamHeader() {
  stream_head_.emplace(bhttp::status::ok, version_);
  auto& head = *stream_head_;
  head.set(bhttp::field::content_type, "text/event-stream");
  head.set(bhttp::field::cache_control, "no-cache");
  head.set("X-Accel-Buffering", "no");
  for (auto& [name, value] : deferred_headers_) head.insert(name, value);
  deferred_headers_.clear();
  head.keep_alive(keep_alive_ && !host_->draining() && !close_after_response_);
  head.chunked(true);
  stream_head_sr_.emplace(head);
  writing_ = true;
  StartWriteTimer();
  WithStream([this](auto& stream) {
    bhttp::async_write_header(stream, *stream_head_sr_,
                              [self = shared_from_this()](beast::error_code ec, size_t) {
                                self->OnWritten(ec, /*last=*/false);
                              });
  });
}

void Connection::Pump() {
  if (state_ != State::kResponding || writing_ || !deferred_) return;
  if (!deferred_->streamed()) {
    HttpResponse whole;
    if (deferred_->Pull(nullptr, &whole)) {
      deferred_.reset();
      status_ = whole.status;
      whole.headers.insert(whole.headers.begin(),
                           std::make_move_iterator(deferred_headers_.begin()),
                           std::make_move_iterator(deferred_headers_.end()));
      deferred_headers_.clear();
      WriteWhole(std::move(whole));
    }
    return;
  }
  out_.clear();
  if (!body_done_) body_done_ = deferred_->Pull(&out_, nullptr);
  if (out_.empty() && !body_done_) return;  // a spurious wake-up
  writing_ = true;
  StartWriteTimer();
  const bool last = body_done_;
  const auto done = [self = shared_from_this(), last](beast::error_code ec, size_t) {
    self->OnWritten(ec, last);
  };
  WithStream([this, last, &done](auto& stream) {
    if (out_.empty()) {
      asio::async_write(stream, bhttp::make_chunk_last(), done);
    } else if (last) {
      asio::async_write(
          stream,
          beast::buffers_cat(bhttp::make_chunk(asio::buffer(out_)), bhttp::make_chunk_last()),
          done);
    } else {
      asio::async_write(stream, bhttp::make_chunk(asio::buffer(out_)), done);
    }
  });
}

void Connection::StartWriteTimer() {
  write_timer_.expires_after(Seconds(host_->options().write_timeout_s));
  write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || !self->writing_ || self->state_ == State::kClosed) return;
    // The client stopped reading: its socket buffer is full and nothing moved.
    spdlog::warn("{}:{} \"{} {}\": write stalled for {} s; aborted", self->request_.remote_addr,
                 self->request_.remote_port, guard::LogField(self->request_.method),
                 guard::LogField(self->request_.path), self->host_->options().write_timeout_s);
    if (self->deferred_) self->deferred_->Abort("the client stopped reading");
    self->Close();
  });
}

void Connection::OnWritten(beast::error_code ec, bool last) {
  writing_ = false;
  write_timer_.cancel();
  if (state_ == State::kClosed) return;
  if (ec) {
    PeerGone("write failed");
    return;
  }
  if (!last) {
    Pump();
    return;
  }
  FinishResponse();
}

void Connection::FinishResponse() {
  host_->OnResponseWritten(request_, status_);
  state_ = State::kIdle;  // counted; not again at Close
  deferred_.reset();
  whole_.reset();
  stream_head_sr_.reset();
  stream_head_.reset();
  body_done_ = false;
  if (!keep_alive_) {
    beast::error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    Close();
    return;
  }
  NextRequest();
}

void Connection::RefuseAndClose(int status, const std::string& message) {
  HttpResponse res;
  res.status = status;
  res.body = ErrorBody(status, message);
  RefuseAndClose(std::move(res));
}

void Connection::RefuseAndClose(HttpResponse&& response) {
  keep_alive_ = false;
  state_ = State::kResponding;
  if (parser_ && parser_->is_header_done()) {
    request_.method = std::string(parser_->get().method_string());
    const auto target = parser_->get().target();
    request_.path = guard::ParseRequestTarget({target.data(), target.size()}).path;
  } else {
    request_.method = "-";
    request_.path = "";
  }
  parser_.reset();
  status_ = response.status;
  WriteWhole(std::move(response));
}

void Connection::PeerGone(const char* why) {
  // A body that has produced its last bytes has nothing left to abort: the
  // client may close as soon as it reads [DONE], before our write completes.
  if (deferred_ && !body_done_) {
    // A stream cut short by its client is counted and logged as 499
    // (nginx's "client closed request"), not with the 200 already sent.
    status_ = 499;
    deferred_->Abort(why);
    spdlog::info("{}:{} \"{} {}\": {}; aborted", request_.remote_addr, request_.remote_port,
                 guard::LogField(request_.method), guard::LogField(request_.path), why);
  }
  Close();
}

void Connection::Close() {
  if (state_ == State::kClosed) return;
  // A response cut short is counted too: a stream with its status, a
  // request whose client left before its response as 499 (nginx's code).
  if (state_ == State::kResponding) host_->OnResponseWritten(request_, status_);
  if (state_ == State::kHandling) host_->OnResponseWritten(request_, 499);
  state_ = State::kClosed;
  deferred_.reset();  // aborts unfinished engine requests
  read_timer_.cancel();
  write_timer_.cancel();
  beast::error_code ignored;
  socket_.close(ignored);
  host_->OnClosed(this);
}

}  // namespace tq::http
