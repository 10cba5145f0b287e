// The per-host remote figures as Prometheus text (server/ops/metrics_exposition.h,
// GetStatsResponse.remote_hosts): counters by host and code, the gauges, and
// the latency histogram's cumulative buckets, _sum and _count. (The whole
// exposition through the official parser: tests/integration/test_remote_adaptive.py.)
#ifdef CONVEYOR_HAVE_SERVER

#include <catch2/catch.hpp>
#include <string>

#include "server/ops/metrics_exposition.h"

namespace conveyor::server {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST_CASE("metrics: remote hosts by host and code, limit, histogram", "[metrics][remote]") {
  v1::GetStatsResponse s;
  CHECK(RenderPrometheusText(s).find("conveyor_remote_") == std::string::npos);

  v1::RemoteHostStats* h = s.add_remote_hosts();
  h->set_host("objects.example:8080");
  v1::RemoteStatusCount* ok = h->add_attempts();
  ok->set_status(200);
  ok->set_count(7);
  v1::RemoteStatusCount* none = h->add_attempts();
  none->set_status(0);
  none->set_count(2);
  h->set_retries(2);
  h->set_connect_failures(1);
  h->set_slow_connects(1);
  h->set_bytes(4096);
  h->set_in_flight(3);
  h->set_queued(5);
  h->set_connection_limit(6);
  h->set_limit_decreases(2);
  for (const double b : {0.01, 1.0}) h->add_latency_bounds_seconds(b);
  for (const uint64_t n : {4, 3, 2}) h->add_latency_counts(n);
  h->set_latency_sum_ns(2'500'000'000);
  const std::string text = RenderPrometheusText(s);
  INFO(text);
  const std::string host = "host=\"objects.example:8080\"";
  CHECK(Has(text, "# TYPE conveyor_remote_requests_total counter"));
  CHECK(Has(text, "conveyor_remote_requests_total{" + host + ",code=\"200\"} 7"));
  CHECK(Has(text, "conveyor_remote_requests_total{" + host + ",code=\"none\"} 2"));
  CHECK(Has(text, "conveyor_remote_retries_total{" + host + "} 2"));
  CHECK(Has(text, "conveyor_remote_connect_failures_total{" + host + "} 1"));
  CHECK(Has(text, "conveyor_remote_slow_connects_total{" + host + "} 1"));
  CHECK(Has(text, "conveyor_remote_bytes_total{" + host + "} 4096"));
  CHECK(Has(text, "conveyor_remote_in_flight{" + host + "} 3"));
  CHECK(Has(text, "conveyor_remote_queued{" + host + "} 5"));
  CHECK(Has(text, "conveyor_remote_connection_limit{" + host + "} 6"));
  CHECK(Has(text, "conveyor_remote_connection_limit_decreases_total{" + host + "} 2"));
  CHECK(Has(text, "# TYPE conveyor_remote_request_seconds histogram"));
  CHECK(Has(text, "conveyor_remote_request_seconds_bucket{" + host + ",le=\"0.01\"} 4"));
  CHECK(Has(text, "conveyor_remote_request_seconds_bucket{" + host + ",le=\"1\"} 7"));
  CHECK(Has(text, "conveyor_remote_request_seconds_bucket{" + host + ",le=\"+Inf\"} 9"));
  CHECK(Has(text, "conveyor_remote_request_seconds_sum{" + host + "} 2.500000000"));
  CHECK(Has(text, "conveyor_remote_request_seconds_count{" + host + "} 9"));
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
