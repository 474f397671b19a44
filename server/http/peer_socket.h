// Noticing that the client of a non-streamed request has gone away.
#pragma once

#include <string>

namespace tq::http {

/// The connected socket of one HTTP request, found from the addresses
/// httplib reports. httplib 0.11.4 gives a handler no access to its socket
/// (only a streaming content provider sees the connection), so a handler
/// that waits for a whole generation looks the socket up once among the
/// process's descriptors: the one whose local port and peer address/port are
/// the request's. httplib keeps that descriptor open until the handler
/// returns, so it cannot be reused meanwhile. Thread-compatible: one per
/// handler thread.
class PeerSocket {
 public:
  /// -1 (never "closed") when no matching socket is found.
  PeerSocket(const std::string& remote_addr, int remote_port, int local_port);

  /// True once the peer has closed or reset the connection (EOF, HUP or
  /// error; unread pipelined bytes count as alive). Costs one poll(2).
  bool Closed() const;

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace tq::http
