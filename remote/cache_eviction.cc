#include "remote/cache_eviction.h"

namespace conveyor::remote {

namespace {

// Least recently used first at the list's front.
class Lru final : public CacheEviction {
 public:
  void Added(const std::string& key, uint64_t /*bytes*/) override {
    Removed(key);
    order_.push_back(key);
    where_[key] = std::prev(order_.end());
  }
  void Touched(const std::string& key) override {
    auto it = where_.find(key);
    if (it == where_.end()) return;
    order_.splice(order_.end(), order_, it->second);
  }
  void Removed(const std::string& key) override {
    auto it = where_.find(key);
    if (it == where_.end()) return;
    order_.erase(it->second);
    where_.erase(it);
  }
  bool Admit(uint64_t bytes, uint64_t /*used*/, uint64_t budget) const override {
    return bytes <= budget;
  }
  std::optional<std::string> Victim() const override {
    if (order_.empty()) return std::nullopt;
    return order_.front();
  }

 private:
  std::list<std::string> order_;
  std::unordered_map<std::string, std::list<std::string>::iterator> where_;
};

// Keeps what is in; admits while there is room; never names a victim.
class FixedSubset final : public CacheEviction {
 public:
  void Added(const std::string&, uint64_t) override {}
  void Touched(const std::string&) override {}
  void Removed(const std::string&) override {}
  bool Admit(uint64_t bytes, uint64_t used, uint64_t budget) const override {
    return bytes <= budget && used <= budget - bytes;
  }
  std::optional<std::string> Victim() const override { return std::nullopt; }
};

}  // namespace

std::unique_ptr<CacheEviction> MakeCacheEviction(CacheEvictionKind kind) {
  switch (kind) {
    case CacheEvictionKind::kLru: return std::make_unique<Lru>();
    case CacheEvictionKind::kFixedSubset: break;
  }
  return std::make_unique<FixedSubset>();
}

}  // namespace conveyor::remote
