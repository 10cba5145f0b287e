#include "remote/http1_client.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"
#include "remote/http_response_head.h"

namespace conveyor::remote {

namespace {

// The longest answer head taken (nginx sends ~250 bytes; S3 ~600).
constexpr size_t kMaxHeadBytes = 16 << 10;
// Bytes asked per recv while the head is read: small, so that little of
// the body lands in the head buffer (and has to be copied out of it).
constexpr size_t kHeadRecvBytes = 1024;
// Bytes of an error answer's body kept for the message.
constexpr size_t kMaxErrorBody = 4096;
// An error body longer than this is not read to its end: the connection is
// closed after the part that is kept.
constexpr uint64_t kMaxErrorBodyRead = 64 << 10;
// Bytes received and dropped (the gaps of a run, error bodies) go through
// a buffer of this size.
constexpr size_t kScratchBytes = 64 << 10;
// Destinations filled by one recvmsg at most.
constexpr size_t kMaxIovecs = 64;

std::string ErrnoText(const char* what, int error_number) {
  return std::string(PosixError(what, error_number).message());
}

}  // namespace

struct Http1Client::Connection {
  enum class State { kConnecting, kSending, kHead, kBody, kErrorBody, kIdle };
  UniqueFd fd;
  std::string pool;
  State state = State::kConnecting;
  uint32_t watching = 0;  // the epoll events asked for
  bool reused = false;    // it carried an answer before this request
  bool reusable = true;   // false: close it after this answer
  Http1Get* get = nullptr;
  size_t sent = 0;       // bytes of get->head sent
  std::vector<char> in;  // the answer's head (and the body bytes after it)
  size_t in_len = 0;
  bool keep_alive = true;  // what the answer's head said
  uint64_t length = 0;     // the body's announced length
  uint64_t got = 0;        // body bytes received
  // A 2xx body's destinations (PlanBody) and where the next byte goes.
  std::vector<Http1Get::Piece> plan;
  size_t piece = 0;
  uint64_t piece_at = 0;
};

Http1Client::Http1Client(CurlEpollDriver* driver, size_t max_idle_per_pool)
    : driver_(driver), max_idle_per_pool_(max_idle_per_pool), scratch_(kScratchBytes) {
  driver_->SetSocketHandler(this);
}

Http1Client::~Http1Client() {
  driver_->SetSocketHandler(nullptr);
  connections_.clear();  // closes every socket (epoll forgets them)
}

void Http1Client::Start(Http1Get* get) {
  get->result = Http1Get::Result::kOk;
  get->status = 0;
  get->content_length = 0;
  get->error.clear();
  get->error_body.clear();
  Track(get);
  auto idle = idle_.find(get->pool);
  while (idle != idle_.end() && !idle->second.empty()) {
    Connection* c = idle->second.back();
    idle->second.pop_back();
    // Readable while idle: the server closed it, or sent bytes after its
    // last answer that would be taken for the start of the next one (epoll
    // tells of both, but maybe not yet): not reused.
    char byte;
    if (::recv(c->fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 || errno != EAGAIN) {
      Close(c);
      continue;
    }
    c->get = get;
    c->state = Connection::State::kSending;
    c->sent = 0;
    c->in_len = 0;
    c->got = 0;
    c->length = 0;
    c->reusable = true;
    return Send(c);
  }
  Connect(get);
}

void Http1Client::Connect(Http1Get* get) {
  UniqueFd fd(::socket(get->address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    get->result = Http1Get::Result::kFailed;
    get->error = ErrnoText("socket", errno);
    finished_.push_back(get);
    return;
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto owned = std::make_unique<Connection>();
  Connection* c = owned.get();
  c->fd = std::move(fd);
  c->pool = get->pool;
  c->get = get;
  c->in.resize(kMaxHeadBytes);
  connections_[c->fd.get()] = std::move(owned);
  const int rc =
      ::connect(c->fd.get(), reinterpret_cast<const sockaddr*>(&get->address), get->address_len);
  if (rc != 0 && errno != EINPROGRESS)
    return Fail(c, Http1Get::Result::kFailed, ErrnoText("connect", errno));
  c->state = rc == 0 ? Connection::State::kSending : Connection::State::kConnecting;
  c->watching = rc == 0 ? EPOLLIN : EPOLLOUT;
  if (!driver_->Watch(c->fd.get(), c->watching, /*added=*/false)) {
    return Fail(c, Http1Get::Result::kFailed, ErrnoText("epoll_ctl", errno));
  }
  if (rc == 0) Send(c);
}

void Http1Client::Send(Connection* c) {
  const std::string& head = c->get->head;
  while (c->sent < head.size()) {
    const ssize_t n =
        ::send(c->fd.get(), head.data() + c->sent, head.size() - c->sent, MSG_NOSIGNAL);
    if (n > 0) {
      c->sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == ENOTCONN)) {
      // The socket buffer is full, or (a stale readiness) the connection is
      // not up yet: wait until it can take more.
      c->state = Connection::State::kSending;
      if (c->watching != EPOLLOUT) {
        c->watching = EPOLLOUT;
        if (!driver_->Watch(c->fd.get(), EPOLLOUT, true)) {
          return Fail(c, Http1Get::Result::kFailed, ErrnoText("epoll_ctl", errno));
        }
      }
      return;
    }
    if (RetryIfStale(c)) return;
    return Fail(c, Http1Get::Result::kFailed, ErrnoText("sending the request", errno));
  }
  c->state = Connection::State::kHead;
  if (c->watching != EPOLLIN) {
    c->watching = EPOLLIN;
    if (!driver_->Watch(c->fd.get(), EPOLLIN, true)) {
      return Fail(c, Http1Get::Result::kFailed, ErrnoText("epoll_ctl", errno));
    }
  }
  // The answer is at least a server's turn away: epoll says when it comes.
}

void Http1Client::OnSocketReady(int fd, uint32_t epoll_events) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection* c = it->second.get();
  switch (c->state) {
    case Connection::State::kConnecting: {
      if ((epoll_events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(c->fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) return Fail(c, Http1Get::Result::kFailed, ErrnoText("connect", err));
      return Send(c);
    }
    case Connection::State::kSending: return Send(c);
    case Connection::State::kHead: return ReadHead(c);
    case Connection::State::kBody: return ReadBody(c);
    case Connection::State::kErrorBody: return ReadErrorBody(c);
    case Connection::State::kIdle: {
      // An idle connection is readable only when the server closed it (or
      // sent what it should not have): either way it is done. A stale
      // readiness finds nothing to read and keeps it.
      char byte;
      const ssize_t n = ::recv(c->fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      return Close(c);
    }
  }
}

void Http1Client::ReadHead(Connection* c) {
  while (true) {
    const size_t space = std::min(kHeadRecvBytes, c->in.size() - c->in_len);
    const ssize_t n = ::recv(c->fd.get(), c->in.data() + c->in_len, space, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      if (c->in_len == 0 && RetryIfStale(c)) return;
      return Fail(c, Http1Get::Result::kFailed, ErrnoText("receiving the answer", errno));
    }
    if (n == 0) {
      if (c->in_len == 0 && RetryIfStale(c)) return;
      return Fail(c, Http1Get::Result::kFailed,
                  c->in_len == 0 ? "the server closed the connection without an answer"
                                 : "the server closed the connection within the answer's head");
    }
    c->in_len += static_cast<size_t>(n);
    const ResponseHead h =
        ParseResponseHead(std::string_view(c->in.data(), c->in_len), kMaxHeadBytes);
    if (h.parse == ResponseHead::Parse::kIncomplete) continue;
    if (h.parse != ResponseHead::Parse::kOk) {
      return Fail(c, Http1Get::Result::kUnsupported, h.why);
    }
    Http1Get* get = c->get;
    get->status = h.status;
    get->content_length = h.content_length;
    c->keep_alive = h.keep_alive;
    c->length = h.content_length;
    const char* extra = c->in.data() + h.head_bytes;
    const size_t extra_len = c->in_len - h.head_bytes;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(extra_len, c->length));
    if (extra_len > c->length) c->reusable = false;  // bytes nobody asked for
    if (h.status >= 200 && h.status < 300) {
      if (get->range_asked && h.status == 200) {
        return Fail(c, Http1Get::Result::kUnsupported,
                    "the server ignored Range (it answered 200, not 206)");
      }
      if (get->range_asked && h.status == 206) {
        // Another range than the one asked would be served as this one.
        std::string mismatch = ContentRangeMismatch(h.content_range, get->range_offset,
                                                    get->range_length, get->object_size);
        if (!mismatch.empty()) return Fail(c, Http1Get::Result::kFailed, std::move(mismatch));
      }
      if (c->length > get->max_body) return Fail(c, Http1Get::Result::kTooLarge, "");
      PlanBody(c);
      c->got = 0;
      Deliver(c, extra, take);  // (the body bytes that came with the head)
      if (c->got == c->length) return Done(c, c->reusable);
      c->state = Connection::State::kBody;
      return ReadBody(c);
    }
    get->error_body.assign(extra, extra + std::min(take, kMaxErrorBody));
    c->got = take;
    if (c->got == c->length) return Done(c, c->reusable);
    if (c->length > kMaxErrorBodyRead) return Done(c, /*reusable=*/false);
    c->state = Connection::State::kErrorBody;
    return ReadErrorBody(c);
  }
}

void Http1Client::PlanBody(Connection* c) {
  Http1Get* get = c->get;
  c->plan.clear();
  c->piece = 0;
  c->piece_at = 0;
  if (get->pieces.empty()) {
    get->body->resize(static_cast<size_t>(c->length));
    c->plan.push_back({get->body, c->length});
    return;
  }
  uint64_t left = c->length;
  for (const Http1Get::Piece& p : get->pieces) {
    if (left == 0) break;
    const uint64_t n = std::min(left, p.length);
    if (p.to != nullptr) p.to->resize(static_cast<size_t>(n));
    c->plan.push_back({p.to, n});
    left -= n;
  }
}

void Http1Client::Deliver(Connection* c, const char* data, size_t n) {
  c->got += n;
  while (n > 0) {
    const Http1Get::Piece& p = c->plan[c->piece];
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, p.length - c->piece_at));
    if (p.to != nullptr) std::memcpy(p.to->data() + c->piece_at, data, take);
    data += take;
    n -= take;
    Advance(c, take);
  }
}

void Http1Client::Advance(Connection* c, uint64_t n) {
  while (n > 0) {
    const uint64_t take = std::min(n, c->plan[c->piece].length - c->piece_at);
    n -= take;
    c->piece_at += take;
    if (c->piece_at == c->plan[c->piece].length) {
      ++c->piece;
      c->piece_at = 0;
    }
  }
}

Http1Client::BodyRecv Http1Client::CheckBodyRecv(Connection* c, ssize_t n) {
  if (n > 0) return BodyRecv::kBytes;
  if (n < 0 && errno == EINTR) return BodyRecv::kAgain;
  if (n < 0 && errno == EAGAIN) return BodyRecv::kWait;
  Fail(c, Http1Get::Result::kFailed,
       n < 0 ? ErrnoText("receiving the answer", errno)
             : absl::StrCat("the server closed the connection after ", c->got, " of ", c->length,
                            " body bytes"));
  return BodyRecv::kEnded;
}

void Http1Client::ReadBody(Connection* c) {
  while (c->got < c->length) {
    // The rest of the body straight into its destinations (a gap's bytes
    // into the scratch buffer): one recvmsg for many pieces.
    iovec iov[kMaxIovecs];
    size_t count = 0;
    size_t want = 0;
    for (size_t i = c->piece; i < c->plan.size() && count < kMaxIovecs; ++i) {
      const Http1Get::Piece& p = c->plan[i];
      const uint64_t left = p.length - (i == c->piece ? c->piece_at : 0);
      if (p.to != nullptr) {
        iov[count++] = {p.to->data() + (p.length - left), static_cast<size_t>(left)};
        want += static_cast<size_t>(left);
        continue;
      }
      const size_t cut = static_cast<size_t>(std::min<uint64_t>(left, scratch_.size()));
      iov[count++] = {scratch_.data(), cut};
      want += cut;
      if (cut < left) break;  // a gap longer than the scratch buffer: the rest next time
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t n = ::recvmsg(c->fd.get(), &msg, 0);
    switch (CheckBodyRecv(c, n)) {
      case BodyRecv::kAgain: continue;
      case BodyRecv::kWait:
      case BodyRecv::kEnded: return;
      case BodyRecv::kBytes: break;
    }
    c->got += static_cast<uint64_t>(n);
    Advance(c, static_cast<uint64_t>(n));  // (the bytes are in place already)
    // Less than asked: the socket is drained for now (epoll says when more
    // comes), so no recv is spent on learning EAGAIN.
    if (static_cast<size_t>(n) < want) break;
  }
  if (c->got == c->length) Done(c, c->reusable);
}

void Http1Client::ReadErrorBody(Connection* c) {
  while (c->got < c->length) {
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(c->length - c->got, scratch_.size()));
    const ssize_t n = ::recv(c->fd.get(), scratch_.data(), want, 0);
    switch (CheckBodyRecv(c, n)) {
      case BodyRecv::kAgain: continue;
      case BodyRecv::kWait:
      case BodyRecv::kEnded: return;
      case BodyRecv::kBytes: break;
    }
    std::vector<uint8_t>& keep = c->get->error_body;
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, keep.size());
    keep.insert(keep.end(), scratch_.data(), scratch_.data() + std::min<size_t>(room, n));
    c->got += static_cast<uint64_t>(n);
  }
  Done(c, c->reusable);
}

bool Http1Client::RetryIfStale(Connection* c) {
  if (!c->reused) return false;
  Http1Get* get = c->get;
  c->get = nullptr;
  Close(c);
  Start(get);
  return true;
}

void Http1Client::Fail(Connection* c, Http1Get::Result result, std::string error) {
  Http1Get* get = c->get;
  get->result = result;
  get->error = std::move(error);
  finished_.push_back(get);
  c->get = nullptr;
  Close(c);
}

void Http1Client::Done(Connection* c, bool reusable) {
  Http1Get* get = c->get;
  get->result = Http1Get::Result::kOk;
  finished_.push_back(get);
  c->get = nullptr;
  std::vector<Connection*>& idle = idle_[c->pool];
  if (!reusable || !c->keep_alive || idle.size() >= max_idle_per_pool_) return Close(c);
  c->state = Connection::State::kIdle;
  c->reused = true;
  idle.push_back(c);
}

void Http1Client::Close(Connection* c) {
  if (c->state == Connection::State::kIdle) {
    std::vector<Connection*>& idle = idle_[c->pool];
    idle.erase(std::remove(idle.begin(), idle.end(), c), idle.end());
  }
  connections_.erase(c->fd.get());  // closes the socket; epoll forgets it
}

void Http1Client::Track(const Http1Get* get) {
  next_deadline_ns_ = std::min({next_deadline_ns_, get->connect_deadline_ns, get->deadline_ns});
}

void Http1Client::ExpireDeadlines(uint64_t now_ns) {
  if (now_ns < next_deadline_ns_) return;
  next_deadline_ns_ = UINT64_MAX;
  std::vector<std::pair<Connection*, std::string>> late;
  for (auto& [fd, owned] : connections_) {
    Connection* c = owned.get();
    if (c->get == nullptr) continue;
    const bool connecting = c->state == Connection::State::kConnecting;
    const uint64_t due = connecting ? std::min(c->get->connect_deadline_ns, c->get->deadline_ns)
                                    : c->get->deadline_ns;
    if (due <= now_ns) {
      late.emplace_back(c, connecting ? "connecting timed out" : "the answer timed out");
    } else {
      next_deadline_ns_ = std::min(next_deadline_ns_, due);
    }
  }
  for (auto& [c, why] : late) Fail(c, Http1Get::Result::kTimedOut, std::move(why));
}

void Http1Client::TakeFinished(std::vector<Http1Get*>* out) {
  out->insert(out->end(), finished_.begin(), finished_.end());
  finished_.clear();
}

}  // namespace conveyor::remote
