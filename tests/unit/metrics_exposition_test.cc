// Tests of the Prometheus text rendering (server/ops/metrics_exposition.h):
// the format's rules line by line, label escaping, and that every daemon
// figure appears. Counters moving with a real service: service_test.cc.
#ifdef CONVEYOR_HAVE_SERVER

#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/ops/metrics_exposition.h"

namespace conveyor::server {
namespace {

v1::GetStatsResponse SomeStats(const std::string& pipeline = "train") {
  v1::GetStatsResponse s;
  s.set_num_threads(4);
  s.set_uptime_ns(1500000000);
  s.set_streams_open(1);
  s.set_streams_total(3);
  s.set_slot_bytes_in_use(1 << 20);
  s.set_slot_bytes_budget(1 << 30);
  for (const char* name : {"sample", "fetch", "decode", "collate", "deliver"}) {
    v1::StageStats* st = s.add_stages();
    st->set_name(name);
    st->set_items_in(10);
    st->set_items_out(9);
    st->set_failures(1);
    st->set_busy_ns(2000000001);
    st->set_wait_input_ns(5);
    st->set_wait_output_ns(7);
    st->set_queue_size(2);
    st->set_queue_capacity(8);
  }
  (*s.mutable_stages(2)->mutable_failures_by_reason())["invalid_argument"] = 1;
  v1::StreamStats* stream = s.add_streams();
  stream->set_stream_id(77);
  stream->set_pipeline(pipeline);
  stream->set_slots_total(4);
  stream->set_slots_held_by_client(3);
  stream->set_peer("unix:/run/x (pid 5, uid 6, gid 7)");
  v1::DeliveryStats* d = s.add_deliveries();
  d->set_pipeline(pipeline);
  d->set_transport("inline");
  d->set_batches(2);
  d->set_images(12);
  d->set_bytes(12 * 3072);
  return s;
}

// Checks the text format's rules and returns "name{labels}" -> value text.
std::map<std::string, std::string> CheckFormat(const std::string& text) {
  REQUIRE(!text.empty());
  REQUIRE(text.back() == '\n');
  const std::regex help(R"(# HELP (conveyor_[a-z_]+) [^\n]+)");
  const std::regex type(R"(# TYPE (conveyor_[a-z_]+) (counter|gauge|histogram))");
  // name, optional {label="value",...}, a value; label values: escaped only.
  const std::regex sample(
      R"((conveyor_[a-z_]+)(\{[a-z_]+="(?:[^"\\\n]|\\[\\"n])*"(?:,[a-z_]+="(?:[^"\\\n]|\\[\\"n])*")*\})? ([0-9]+(?:\.[0-9]+)?))");
  std::map<std::string, std::string> samples;
  std::set<std::string> families;
  std::string helped, typed, kind;
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(text.substr(0, text.size() - 1), '\n'))) {
    INFO(line);
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      CHECK(families.insert(m[1]).second);  // each family once, contiguous
      helped = m[1];
    } else if (std::regex_match(line, m, type)) {
      CHECK(m[1] == helped);  // TYPE right after its HELP
      typed = m[1];
      kind = m[2];
      const bool total = typed.size() > 6 && typed.substr(typed.size() - 6) == "_total";
      CHECK(total == (kind == "counter"));  // counters, and only they, end in _total
    } else {
      REQUIRE(std::regex_match(line, m, sample));
      // A sample belongs to the family announced last (a histogram's:
      // its _bucket, _sum and _count lines).
      if (kind == "histogram") {
        CHECK((m[1] == typed + "_bucket" || m[1] == typed + "_sum" || m[1] == typed + "_count"));
      } else {
        CHECK(m[1] == typed);
      }
      CHECK(samples.emplace(std::string(m[1]) + std::string(m[2]), m[3]).second);
    }
  }
  return samples;
}

TEST_CASE("metrics: every figure in the text format, HELP and TYPE first", "[metrics]") {
  const std::map<std::string, std::string> s = CheckFormat(RenderPrometheusText(SomeStats()));
  CHECK(s.at("conveyor_worker_threads") == "4");
  CHECK(s.at("conveyor_uptime_seconds") == "1.500000000");
  CHECK(s.at("conveyor_streams_open") == "1");
  CHECK(s.at("conveyor_streams_opened_total") == "3");
  CHECK(s.at("conveyor_stream_slots") == "4");
  CHECK(s.at("conveyor_stream_slots_held_by_clients") == "3");
  CHECK(s.at("conveyor_slot_memory_bytes") == "1048576");
  CHECK(s.at("conveyor_slot_memory_budget_bytes") == "1073741824");
  CHECK(s.at(R"(conveyor_stage_items_in_total{stage="fetch"})") == "10");
  CHECK(s.at(R"(conveyor_stage_items_out_total{stage="decode"})") == "9");
  CHECK(s.at(R"(conveyor_stage_busy_seconds_total{stage="decode"})") == "2.000000001");
  CHECK(s.at(R"(conveyor_stage_waiting_seconds_total{stage="fetch",waiting_for="input"})") ==
        "0.000000005");
  CHECK(s.at(R"(conveyor_stage_waiting_seconds_total{stage="fetch",waiting_for="output"})") ==
        "0.000000007");
  CHECK(s.at(R"(conveyor_stage_queue_items{stage="decode"})") == "2");
  CHECK(s.at(R"(conveyor_stage_queue_capacity_items{stage="decode"})") == "8");
  CHECK(s.at(R"(conveyor_stage_tasks_in_flight{stage="decode"})") == "0");
  CHECK(s.at(R"(conveyor_stage_failures_total{stage="decode",reason="invalid_argument"})") == "1");
  CHECK(s.at(R"(conveyor_delivered_batches_total{pipeline="train",transport="inline"})") == "2");
  CHECK(s.at(R"(conveyor_delivered_images_total{pipeline="train",transport="inline"})") == "12");
  CHECK(s.at(R"(conveyor_delivered_bytes_total{pipeline="train",transport="inline"})") == "36864");
}

TEST_CASE("metrics: no stream, sample or client becomes a label", "[metrics]") {
  const std::string text = RenderPrometheusText(SomeStats());
  CHECK(text.find("77") == std::string::npos);  // the stream id
  CHECK(text.find("pid") == std::string::npos);
  CHECK(text.find("stream_id") == std::string::npos);
}

TEST_CASE("metrics: label values are escaped, whatever the name holds", "[metrics]") {
  CHECK(PrometheusLabelValue("plain-name_1.0") == "plain-name_1.0");
  CHECK(PrometheusLabelValue("a\"b") == R"(a\"b)");
  CHECK(PrometheusLabelValue("a\\b") == R"(a\\b)");
  // A line feed becomes EscapeText's "\n" (two characters), escaped again.
  CHECK(PrometheusLabelValue("a\nb") == R"(a\\nb)");
  CHECK(PrometheusLabelValue(std::string("a\0b", 3)) == R"(a\\x00b)");
  CHECK(PrometheusLabelValue("bad \xff byte") == R"(bad \\xff byte)");
  CHECK(PrometheusLabelValue("caf\xc3\xa9") == "caf\xc3\xa9");  // UTF-8 kept

  const std::string hostile = "we\"ird\nname\\ \xfe";
  const std::map<std::string, std::string> s =
      CheckFormat(RenderPrometheusText(SomeStats(hostile)));
  CHECK(s.count(R"(conveyor_delivered_images_total{pipeline="we\"ird\\nname\\ \\xfe",)"
                R"(transport="inline"})") == 1);
}

TEST_CASE("metrics: fetches waiting on the network, per pipeline and host", "[metrics]") {
  v1::GetStatsResponse st = SomeStats();
  st.mutable_streams(0)->set_fetches_pending(3);
  v1::PendingFetch* f = st.mutable_streams(0)->mutable_oldest_fetch();
  f->set_host("objects.example:8080");
  f->set_age_ns(2'500'000'000);
  v1::StreamStats* other = st.add_streams();  // same pipeline and host, younger
  other->set_stream_id(78);
  other->set_pipeline("train");
  other->set_fetches_pending(1);
  other->mutable_oldest_fetch()->set_host("objects.example:8080");
  other->mutable_oldest_fetch()->set_age_ns(1'000'000'000);
  const std::string text = RenderPrometheusText(st);
  const std::map<std::string, std::string> s = CheckFormat(text);
  CHECK(s.at(R"(conveyor_fetches_pending{pipeline="train"})") == "4");
  CHECK(
      s.at(R"(conveyor_oldest_fetch_age_seconds{pipeline="train",host="objects.example:8080"})") ==
      "2.500000000");
  CHECK(text.find("78") == std::string::npos);  // no stream becomes a label
}

TEST_CASE("metrics: output caches, per pipeline with cache_output", "[metrics]") {
  v1::GetStatsResponse st = SomeStats();
  v1::OutputCacheStats* c = st.add_output_caches();
  c->set_pipeline("eval");
  c->set_hits(48);
  c->set_misses(50);
  c->set_evictions(2);
  c->set_bytes(7'000'000);
  c->set_capacity_bytes(64 << 20);
  const std::map<std::string, std::string> s = CheckFormat(RenderPrometheusText(st));
  CHECK(s.at(R"(conveyor_output_cache_hits_total{pipeline="eval"})") == "48");
  CHECK(s.at(R"(conveyor_output_cache_misses_total{pipeline="eval"})") == "50");
  CHECK(s.at(R"(conveyor_output_cache_evictions_total{pipeline="eval"})") == "2");
  CHECK(s.at(R"(conveyor_output_cache_bytes{pipeline="eval"})") == "7000000");
  CHECK(s.at(R"(conveyor_output_cache_capacity_bytes{pipeline="eval"})") == "67108864");
  // Without a cached pipeline, no family at all.
  CHECK(RenderPrometheusText(SomeStats()).find("conveyor_output_cache") == std::string::npos);
}

TEST_CASE("metrics: an idle daemon's exposition is valid too", "[metrics]") {
  v1::GetStatsResponse empty;
  const std::map<std::string, std::string> s = CheckFormat(RenderPrometheusText(empty));
  CHECK(s.at("conveyor_streams_open") == "0");
  CHECK(s.at("conveyor_stream_slots") == "0");
  // Refusals have a series per code from the start, even with nothing set.
  CHECK(s.at(R"(conveyor_streams_refused_total{code="resource_exhausted"})") == "0");
}

TEST_CASE("metrics: every stage has every failure reason, zeros included", "[metrics]") {
  const std::map<std::string, std::string> s = CheckFormat(RenderPrometheusText(SomeStats()));
  const char* reasons[] = {"cancelled",
                           "unknown",
                           "invalid_argument",
                           "deadline_exceeded",
                           "not_found",
                           "already_exists",
                           "permission_denied",
                           "resource_exhausted",
                           "failed_precondition",
                           "aborted",
                           "out_of_range",
                           "unimplemented",
                           "internal",
                           "unavailable",
                           "data_loss",
                           "unauthenticated"};
  for (const char* stage : {"sample", "fetch", "decode", "collate", "deliver"}) {
    for (const char* reason : reasons) {
      const std::string key = absl::StrCat(R"(conveyor_stage_failures_total{stage=")", stage,
                                           R"(",reason=")", reason, R"("})");
      INFO(key);
      REQUIRE(s.count(key) == 1);
      const bool seen = std::string(stage) == "decode" && std::string(reason) == "invalid_argument";
      CHECK(s.at(key) == (seen ? "1" : "0"));
    }
  }
  CHECK(s.count(R"(conveyor_stage_failures_total{stage="decode",reason="ok"})") == 0);
}

TEST_CASE("metrics: refused streams by code, every code present", "[metrics]") {
  v1::GetStatsResponse st = SomeStats();
  (*st.mutable_streams_refused_by_code())["not_found"] = 3;
  (*st.mutable_streams_refused_by_code())["unavailable"] = 1;
  const std::map<std::string, std::string> s = CheckFormat(RenderPrometheusText(st));
  CHECK(s.at(R"(conveyor_streams_refused_total{code="not_found"})") == "3");
  CHECK(s.at(R"(conveyor_streams_refused_total{code="unavailable"})") == "1");
  CHECK(s.at(R"(conveyor_streams_refused_total{code="permission_denied"})") == "0");
  CHECK(s.at(R"(conveyor_streams_refused_total{code="unauthenticated"})") == "0");
  CHECK(s.count(R"(conveyor_streams_refused_total{code="ok"})") == 0);
}

TEST_CASE("metrics: the data-wait histogram is cumulative and ends in +Inf", "[metrics]") {
  v1::GetStatsResponse st = SomeStats();
  v1::DataWaitStats* w = st.add_data_wait();
  w->set_pipeline("train");
  w->add_bucket_upper_ns(1'000'000);    // 0.001 s
  w->add_bucket_upper_ns(250'000'000);  // 0.25 s
  w->add_bucket_counts(5);
  w->add_bucket_counts(2);
  w->add_bucket_counts(1);  // over 0.25 s
  w->set_count(8);
  w->set_sum_ns(1'500'000'001);
  const std::map<std::string, std::string> s = CheckFormat(RenderPrometheusText(st));
  CHECK(s.at(R"(conveyor_client_data_wait_seconds_bucket{pipeline="train",le="0.001"})") == "5");
  CHECK(s.at(R"(conveyor_client_data_wait_seconds_bucket{pipeline="train",le="0.25"})") == "7");
  CHECK(s.at(R"(conveyor_client_data_wait_seconds_bucket{pipeline="train",le="+Inf"})") == "8");
  CHECK(s.at(R"(conveyor_client_data_wait_seconds_count{pipeline="train"})") == "8");
  CHECK(s.at(R"(conveyor_client_data_wait_seconds_sum{pipeline="train"})") == "1.500000001");
  CHECK(s.at(R"(conveyor_client_starved_seconds_total{pipeline="train"})") == "1.500000001");
}

TEST_CASE("metrics: config reloads by result and the last success's time", "[metrics]") {
  v1::GetStatsResponse stats;
  stats.set_config_reloads_succeeded(3);
  stats.set_config_reloads_failed(1);
  stats.set_config_last_reload_success_unix_ns(1764700000123456789);
  const std::map<std::string, std::string> s = CheckFormat(RenderPrometheusText(stats));
  CHECK(s.at(R"(conveyor_config_reloads_total{result="success"})") == "3");
  CHECK(s.at(R"(conveyor_config_reloads_total{result="failure"})") == "1");
  CHECK(s.at("conveyor_config_last_reload_success_timestamp_seconds") == "1764700000.123456789");
  // Both results are there before any reload (a rate() of 0, not a gap).
  const std::map<std::string, std::string> idle =
      CheckFormat(RenderPrometheusText(v1::GetStatsResponse()));
  CHECK(idle.at(R"(conveyor_config_reloads_total{result="failure"})") == "0");
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
