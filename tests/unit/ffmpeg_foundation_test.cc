// The FFmpeg foundation: AvError's mapping of AVERROR codes,
// AvMemoryInput's demuxing of bytes held in memory and AvDecodeBudget's
// clock.
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/base/posix_error.h"
#include "core/base/thread_cpu_clock.h"
#include "core/decode/ffmpeg/decode_budget.h"
#include "core/decode/ffmpeg/error.h"
#include "core/decode/ffmpeg/memory_input.h"

namespace conveyor {
namespace {

// A 2x1 24-bit BMP (BITMAPINFOHEADER), written by hand: rows padded to 4.
std::vector<uint8_t> TinyBmp() {
  std::vector<uint8_t> b = {'B', 'M'};
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto u16 = [&](uint16_t v) {
    b.push_back(static_cast<uint8_t>(v));
    b.push_back(static_cast<uint8_t>(v >> 8));
  };
  const uint32_t row = 8;  // 2 pixels * 3 bytes, padded to 8
  u32(14 + 40 + row);
  u32(0);
  u32(14 + 40);
  u32(40);
  u32(2);
  u32(1);
  u16(1);
  u16(24);
  u32(0);
  u32(row);
  u32(2835);
  u32(2835);
  u32(0);
  u32(0);
  const uint8_t pixels[8] = {0, 0, 255, 255, 0, 0, 0, 0};  // BGR red, BGR blue, pad
  b.insert(b.end(), pixels, pixels + 8);
  return b;
}

TEST_CASE("AvError maps data errors to the sample and errnos to PosixError", "[av]") {
  CHECK(AvError(AVERROR_INVALIDDATA, "x.png").code() == absl::StatusCode::kInvalidArgument);
  CHECK(AvError(AVERROR_INVALIDDATA, "x.png").message().find("x.png: ") == 0);
  CHECK(AvError(AVERROR(ENOMEM), "x").code() == absl::StatusCode::kResourceExhausted);
  CHECK(AvError(AVERROR_EXIT, "x").code() == absl::StatusCode::kDeadlineExceeded);
  const absl::Status io = AvError(AVERROR(EIO), "read x");
  CHECK(IsSystemError(io));
  CHECK_FALSE(IsSystemError(AvError(AVERROR(ENOENT), "x")));
}

TEST_CASE("AvMemoryInput probes the container from the bytes", "[av]") {
  const std::vector<uint8_t> bmp = TinyBmp();
  auto input = AvMemoryInput::Open(bmp, "tiny.bmp", {});
  REQUIRE(input.ok());
  AVFormatContext* format = (*input)->format();
  REQUIRE(avformat_find_stream_info(format, nullptr) >= 0);
  REQUIRE(format->nb_streams == 1);
  CHECK(format->streams[0]->codecpar->codec_id == AV_CODEC_ID_BMP);
  CHECK(format->streams[0]->codecpar->width == 2);
  CHECK(format->streams[0]->codecpar->height == 1);
}

TEST_CASE("AvMemoryInput refuses bytes no demuxer knows, naming the input", "[av]") {
  std::vector<uint8_t> noise(4096);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>((i * 7919) >> 3);
  auto input = AvMemoryInput::Open(noise, "noise.bin", {});
  REQUIRE_FALSE(input.ok());
  CHECK(input.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(input.status().message().find("noise.bin") != std::string::npos);
  auto empty = AvMemoryInput::Open({}, "empty.bin", {});
  CHECK_FALSE(empty.ok());
}

// Burns this thread's CPU for at least `seconds`.
void Spin(double seconds) {
  const int64_t end = ThreadCpuNs() + static_cast<int64_t>(seconds * 1e9);
  volatile uint64_t x = 0;
  while (ThreadCpuNs() < end) x = x + 1;
}

TEST_CASE("AvMemoryInput stops once its budget is spent", "[av]") {
  const std::vector<uint8_t> bmp = TinyBmp();
  AvMemoryInput::Options options;
  options.budget = AvDecodeBudget::StartNow(1e-6);
  Spin(1e-5);
  auto input = AvMemoryInput::Open(bmp, "late.bmp", options);
  REQUIRE_FALSE(input.ok());
  CHECK(input.status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("AvDecodeBudget counts this thread's CPU time, with a wall backstop", "[av]") {
  CHECK_FALSE(AvDecodeBudget().limited());
  CHECK_FALSE(AvDecodeBudget().spent());
  CHECK_FALSE(AvDecodeBudget::StartNow(0).limited());

  // Sleeping (descheduled) for three budgets spends none of it.
  const AvDecodeBudget sleeper = AvDecodeBudget::StartNow(0.05);
  CHECK(sleeper.limited());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  CHECK_FALSE(sleeper.spent());

  // Running does.
  const AvDecodeBudget runner = AvDecodeBudget::StartNow(0.02);
  Spin(0.03);
  CHECK(runner.spent());

  // Past kWallFactor budgets of wall time it is spent, CPU or not.
  const AvDecodeBudget backstop = AvDecodeBudget::StartNow(0.01);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(static_cast<int>(0.01 * AvDecodeBudget::kWallFactor * 1000) + 50));
  CHECK(backstop.spent());
}

}  // namespace
}  // namespace conveyor
