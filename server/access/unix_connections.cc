#include "server/access/unix_connections.h"

#include <sys/stat.h>

namespace conveyor::server {

namespace {
std::optional<ino_t> SocketInode(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return st.st_ino;
}
}  // namespace

bool UnixConnections::Add(int fd, const PeerCredentials& credentials, bool is_operator) {
  const std::optional<ino_t> inode = SocketInode(fd);
  if (!inode) return false;
  MutexLock lock(&mu_);
  by_fd_[fd] = Connection{credentials, is_operator, *inode};
  return true;
}

std::optional<UnixConnections::Connection> UnixConnections::Find(int fd) const {
  const std::optional<ino_t> inode = SocketInode(fd);
  MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end() || !inode || it->second.inode != *inode) return std::nullopt;
  return it->second;
}

size_t UnixConnections::size() const {
  MutexLock lock(&mu_);
  return by_fd_.size();
}

}  // namespace conveyor::server
