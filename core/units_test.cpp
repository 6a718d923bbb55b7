#include "core/units.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/test_util.h"

namespace meshsim {
namespace {

TEST(Units, ParsesSizesWithBinaryAndDecimalPrefixes) {
  EXPECT_EQ(parse_bytes("64MiB", "x"), 64 * 1048576);
  EXPECT_EQ(parse_bytes("1KiB", "x"), 1024);
  EXPECT_EQ(parse_bytes("4GiB", "x"), Bytes{4} << 30);
  EXPECT_EQ(parse_bytes("1.5GB", "x"), 1500000000);
  EXPECT_EQ(parse_bytes("4096", "x"), 4096);
}

// Sizes read back as they are usually typed, and parse to the same bytes when whole.
TEST(Units, FormatsSizesAsTheyAreTyped) {
  EXPECT_EQ(format_bytes(64 << 20), "64MiB");
  EXPECT_EQ(format_bytes(64'000'000), "64MB");  // was 62500KiB
  EXPECT_EQ(format_bytes(Bytes{2} << 40), "2TiB");
  EXPECT_EQ(format_bytes(3'000'000'000), "3GB");
  EXPECT_EQ(format_bytes(512 << 10), "512KiB");
  EXPECT_EQ(format_bytes(1536 << 10), "1.50MiB");
  EXPECT_EQ(format_bytes(1'000'003), "976.57KiB");
  EXPECT_EQ(format_bytes(1000), "1000B");
  for (const char* typed : {"64MiB", "64MB", "2TiB", "3GB", "512KiB"})
    EXPECT_EQ(format_bytes(parse_bytes(typed, "t")), typed);
}

TEST(Units, ParsesBandwidthInBytesAndBits) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("25GB/s", "x").bytes_per_s(), 25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("200Gb/s", "x").bytes_per_s(), 25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("56Gb/s", "x").bytes_per_s(), 7e9);
}

TEST(Units, ParsesTimes) {
  EXPECT_EQ(parse_time("1.5us", "x").ps(), 1'500'000);
  EXPECT_EQ(parse_time("200ns", "x").ps(), 200'000);
  EXPECT_EQ(parse_time("0", "x").ps(), 0);
}

TEST(Units, RejectsTyposNamingTheFieldAndTheFix) {
  try {
    parse_bandwidth("25GB/sec", "links[0].bandwidth");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("links[0].bandwidth"), std::string::npos) << m;
    EXPECT_NE(m.find("GB/s"), std::string::npos) << m;
  }
  EXPECT_THROW(parse_bandwidth("-5GB/s", "bw"), Error);
  EXPECT_THROW(parse_bandwidth("0GB/s", "bw"), Error);
  EXPECT_THROW(parse_bandwidth("1e-300B/s", "bw"), Error);
  EXPECT_THROW(parse_time("1e300s", "alpha"), Error);  // overflowed a collective's time (issue 40)
  EXPECT_EQ(parse_time("3600s", "alpha"), sec(3600));  // no link that slow: its times overflow
  EXPECT_THROW(parse_bandwidth("2PB/s", "bw"), Error);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1KB/s", "bw").bytes_per_s(), 1e3);
  EXPECT_THROW(parse_bytes("12 parsecs", "size"), Error);
  EXPECT_THROW(parse_time("3 fortnights", "lat"), Error);
  EXPECT_THROW(parse_bytes("", "size"), Error);
}

TEST(Units, ParsesComputeRates) {
  EXPECT_DOUBLE_EQ(parse_flops("989TFLOP/s", "x"), 989e12);
  EXPECT_DOUBLE_EQ(parse_flops("67TFLOPS", "x"), 67e12);
  EXPECT_DOUBLE_EQ(parse_flops("1.2PFLOP/s", "x"), 1.2e15);
  EXPECT_DOUBLE_EQ(parse_flops("500 GFLOP/s", "x"), 500e9);
  try {
    parse_flops("989TFLOP", "gpu.peak_flops_bf16");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gpu.peak_flops_bf16"), std::string::npos) << m;
    EXPECT_NE(m.find("TFLOP/s"), std::string::npos) << m;
  }
  EXPECT_THROW(parse_flops("-1TFLOP/s", "x"), Error);
  EXPECT_THROW(parse_flops("0TFLOP/s", "x"), Error);
  EXPECT_EQ(format_flops(989e12), "989.0TFLOP/s");
}

TEST(Units, TransferTimeRoundsUpToWholePicoseconds) {
  EXPECT_EQ(transfer_time(25, GBps(25)).ps(), 1000);  // 25 B at 25 GB/s = 1 ns
  EXPECT_EQ(transfer_time(1, GBps(3)).ps(), 334);     // 333.33 ps -> 334
  EXPECT_EQ(transfer_time(0, GBps(3)).ps(), 0);
}

}  // namespace
}  // namespace meshsim

namespace meshsim {
namespace {

TEST(Units, ParsesWholeIntegersOnly) {
  EXPECT_EQ(parse_int("16"), 16);
  EXPECT_EQ(parse_int("-3"), -3);
  EXPECT_FALSE(parse_int("16x"));
  EXPECT_FALSE(parse_int(""));
  EXPECT_FALSE(parse_int("99999999999"));
  EXPECT_FALSE(parse_int("2.5"));
}

}  // namespace
}  // namespace meshsim

namespace meshsim {
namespace {
using testing_util::contains;
using testing_util::error_of;

TEST(Units, ByteSweepsDouble) {
  EXPECT_EQ(parse_bytes_sweep("1KiB:8KiB", "--bytes"), (std::vector<Bytes>{1024, 2048, 4096, 8192}));
  EXPECT_EQ(parse_bytes_sweep("3KiB:8KiB", "--bytes"), (std::vector<Bytes>{3072, 6144}));
  EXPECT_EQ(parse_bytes_sweep("64MiB", "--bytes"), (std::vector<Bytes>{64 << 20}));
  EXPECT_TRUE(contains(error_of([] { parse_bytes_sweep("8KiB:1KiB", "--sizes"); }),
                       "--sizes: sweep '8KiB:1KiB' needs 0 < MIN <= MAX"));
  EXPECT_TRUE(contains(error_of([] { parse_bytes_sweep("1KiB:4Kb", "--sizes"); }), "--sizes"));
}

TEST(Units, ByteSweepsTakeAStepFactorAsNcclTestsDo) {
  // nccl-tests -b 8 -e 1000 -f 4: 8, 32, 128, 512 (the next, 2048, passes MAX).
  EXPECT_EQ(parse_bytes_sweep("8:1000:4", "--bytes"), (std::vector<Bytes>{8, 32, 128, 512}));
  EXPECT_EQ(parse_bytes_sweep("1KiB:8KiB:2", "--bytes"), parse_bytes_sweep("1KiB:8KiB", "--bytes"));
  // The top of the range: sizes stop at 1 PiB (8000000TB was an int64 overflow, issue 16).
  EXPECT_EQ(parse_bytes_sweep("1:1024TiB:4", "--bytes").back(), Bytes{1} << 50);
  EXPECT_TRUE(
      contains(error_of([] { parse_bytes_sweep("1:8000000TB:4", "--bytes"); }), "--bytes: '8000000TB' is over 1PiB"));
  for (const char* bad : {"8:1G:1", "8:1G:x", "8:1G:0", "8:1G:2000"})
    EXPECT_TRUE(contains(error_of([&] { parse_bytes_sweep(bad, "--bytes"); }), "is not an integer in 2..1024")) << bad;
}

}  // namespace
}  // namespace meshsim
