// dpx fit: the fits recover the alpha, beta and gamma that made synthetic measurements (with 1 %
// noise), the overhead models recover their coefficients, and bad inputs give clear errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "analysis/cost_model.hpp"
#include "analysis/fit.hpp"
#include "core/error.hpp"
#include "../common/files.hpp"

using namespace dpx;
using namespace dpx::analysis;

namespace {

constexpr double kAlpha = 20e-6, kBeta = 1.0 / 2e9, kGamma = 1.0 / 5e9;  // 20 us, 2 GB/s, 5 GB/s

// A deterministic +-1 % wobble, so the fit sees noise but the test never flakes.
double wobble(int i) { return 1 + 0.01 * std::sin(1.7 * i + 0.3); }

std::vector<CollectivePoint> synthetic(const std::string& coll, const std::string& algo, std::vector<int> ranks,
                                       int& i) {
  std::vector<CollectivePoint> pts;
  for (int p : ranks)
    for (double bytes = 1024; bytes <= 64.0 * (1 << 20); bytes *= 4) {
      CollectivePoint pt{coll, algo, "threads", false, p, 1, bytes, bytes / 4, 0};
      pt.time_s = cost_terms(coll, algo, CallShape{bytes, bytes / 4, p, 1})->seconds(kAlpha, kBeta, kGamma) * wobble(i++);
      pts.push_back(pt);
    }
  return pts;
}

const CollectiveFit& find(const std::vector<CollectiveFit>& fits, const std::string& coll, const std::string& algo) {
  for (const CollectiveFit& f : fits)
    if (f.collective == coll && f.algo == algo) return f;
  FAIL("no fit for ", coll, " ", algo);
  throw;
}

const char* kHeader = "collective,algo,backend,ranks,bytes,count,dtype,op,root,placement,time_us,algbw_gbs,busbw_gbs,wrong\n";

// The collective CSV header, then `rows` (a function, not operator+: GCC 12's -Wrestrict misfires there).
std::string with_header(const char* rows) {
  std::string text = kHeader;
  text += rows;
  return text;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("fits recover alpha, beta and gamma from measurements made with them") {
  int i = 0;
  std::vector<CollectivePoint> pts = synthetic("sendrecv", "ring", {2}, i);
  for (const char* algo : {"ring", "tree", "rhd", "naive"}) {
    auto more = synthetic("all_reduce", algo, {2, 3, 4, 8}, i);
    pts.insert(pts.end(), more.begin(), more.end());
  }
  auto gather = synthetic("all_gather", "ring", {2, 4, 5}, i);
  pts.insert(pts.end(), gather.begin(), gather.end());
  const auto fits = fit_collectives(pts);
  const CollectiveFit& sr = find(fits, "sendrecv", "ring");
  REQUIRE(sr.ok);
  CHECK(sr.alpha_s == doctest::Approx(kAlpha).epsilon(0.03));
  CHECK(sr.beta_s_per_byte == doctest::Approx(kBeta).epsilon(0.03));
  CHECK(sr.r2 > 0.999);
  CHECK(sr.max_rel_residual < 0.03);
  for (const char* algo : {"ring", "tree", "rhd", "naive"}) {
    CAPTURE(algo);
    const CollectiveFit& f = find(fits, "all_reduce", algo);
    REQUIRE(f.ok);
    REQUIRE(f.has_gamma);
    CHECK(f.beta_from == "sendrecv ring (threads)");  // sendrecv is preferred over all_gather
    CHECK(f.alpha_s == doctest::Approx(kAlpha).epsilon(0.05));
    CHECK(f.gamma_s_per_byte == doctest::Approx(kGamma).epsilon(0.05));
    CHECK(f.bytes_min == 1024);
    CHECK(f.ranks_max == 8);
  }
  const CollectiveFit& ag = find(fits, "all_gather", "ring");
  CHECK(ag.alpha_s == doctest::Approx(kAlpha).epsilon(0.03));
  CHECK(ag.beta_s_per_byte == doctest::Approx(kBeta).epsilon(0.03));
}

TEST_CASE("a reduction without a collective that does not reduce folds gamma into beta, and says so") {
  int i = 0;
  const auto fits = fit_collectives(synthetic("all_reduce", "ring", {2, 4}, i));
  REQUIRE(fits.size() == 1);
  CHECK(fits[0].ok);
  CHECK_FALSE(fits[0].has_gamma);
  CHECK(fits[0].note.find("beta includes the reduction") != std::string::npos);
  // ring: b = 2(p-1)/p n, c = (p-1)/p n, so the effective beta is beta + gamma / 2.
  CHECK(fits[0].beta_s_per_byte == doctest::Approx(kBeta + kGamma / 2).epsilon(0.03));
}

TEST_CASE("too few points and poor fits give reasons, not numbers") {
  std::vector<CollectivePoint> one = {{"sendrecv", "ring", "threads", false, 2, 1, 4096, 1024, 1e-5}};
  auto fits = fit_collectives(one);
  REQUIRE(fits.size() == 1);
  CHECK_FALSE(fits[0].ok);
  CHECK(fits[0].reason.find("too few points") != std::string::npos);

  std::vector<CollectivePoint> noise;
  for (int k = 0; k < 12; ++k)  // times that do not grow with the size at all, but scatter
    noise.push_back({"sendrecv", "ring", "threads", false, 2, 1, 1024.0 * (1 << k), 256.0 * (1 << k), (k % 3 == 0 ? 9e-3 : 1e-3)});
  fits = fit_collectives(noise);
  REQUIRE(fits.size() == 1);
  CHECK_FALSE(fits[0].ok);
  CHECK(fits[0].reason.find("poor fit") != std::string::npos);
}

TEST_CASE("the library's own collectives are fitted per rank count") {
  std::vector<CollectivePoint> pts;
  for (int p : {2, 4})
    for (double b = 1024; b <= (1 << 24); b *= 4) pts.push_back({"all_reduce", "mpi", "mpi", false, p, 1, b, b / 4, 3e-6 * p + b * 1e-9});
  const auto fits = fit_collectives(pts);
  REQUIRE(fits.size() == 2);
  for (const CollectiveFit& f : fits) {
    CHECK(f.ok);
    CHECK(f.ranks == f.ranks_min);
    CHECK(f.alpha_s == doctest::Approx(3e-6 * f.ranks).epsilon(0.01));
    CHECK(f.beta_s_per_byte == doctest::Approx(1e-9).epsilon(0.01));
  }
}

TEST_CASE("overhead models recover linear and quadratic coefficients") {
  std::vector<OverheadPoint> pts;
  const double params[] = {0.06e6, 1.2e6, 11.7e6, 25.6e6, 61e6, 138e6};
  for (double P : params) {
    OverheadPoint p;
    p.model = std::to_string(P);
    p.parallel = "ddp";
    p.algo = "ring";
    p.devices = "cpu:4";
    p.ranks = 4;
    p.bucket_mb = 25;
    p.params = P;
    p.comm_s = 0.002 + 4e-9 * P;
    p.exposed_s = 0.001 + 1e-9 * P;
    pts.push_back(p);
  }
  const auto fits = fit_overheads(pts);
  REQUIRE(fits.size() == 4);  // comm_total and comm_exposed, linear and quadratic
  for (const OverheadFit& f : fits) {
    CAPTURE(f.target);
    CAPTURE(f.kind);
    REQUIRE(f.ok);
    const bool total = f.target == "comm_total";
    CHECK(f.coef[0] == doctest::Approx(total ? 0.002 : 0.001).epsilon(0.01));
    CHECK(f.coef[1] == doctest::Approx(total ? 4e-9 : 1e-9).epsilon(0.01));
    if (f.kind == "quadratic") CHECK(std::abs(f.coef[2]) < 1e-18);
    CHECK(f.r2 > 0.9999);
    CHECK(f.models == 6);
  }
  // Another bucket size is another group: fitted apart, not mixed in.
  std::vector<OverheadPoint> two = pts;
  for (OverheadPoint& p : two) p.bucket_mb = 1, p.comm_s *= 3;
  two.insert(two.end(), pts.begin(), pts.end());
  const auto split = fit_overheads(two);
  REQUIRE(split.size() == 8);
  for (const OverheadFit& f : split) {
    CHECK(f.ok);
    if (f.target == "comm_total") CHECK(f.coef[0] == doctest::Approx(f.bucket_mb == 1 ? 0.006 : 0.002).epsilon(0.01));
  }
  pts.resize(2);
  for (const OverheadFit& f : fit_overheads(pts)) {
    CHECK_FALSE(f.ok);
    CHECK(f.reason.find("too few models") != std::string::npos);
  }
}

TEST_CASE("dpx fit's files: round trip through JSON, and bad inputs named") {
  dpx::testing::TempDir dir("fit");
  std::string csv = kHeader;
  for (int k = 0; k < 8; ++k) {
    const double bytes = 1024.0 * (1 << (2 * k));
    const double us = (kAlpha + bytes * kBeta) * 1e6;
    char row[160];
    std::snprintf(row, sizeof row, "sendrecv,ring,threads,2,%.0f,1,float,none,-1,out,%.6f,1,1,0\n", bytes, us);
    csv += row;
  }
  csv += "sendrecv,ring,threads,2,4096,1024,float,none,-1,out,1.0,1,1,3\n";  // wrong values: left out
  write(dir.file("c.csv"), csv);
  const FitResult r = fit_files({dir.file("c.csv")});
  CHECK(r.skipped_wrong == 1);
  REQUIRE(r.collectives.size() == 1);
  CHECK(r.collectives[0].ok);
  write(dir.file("fit.json"), fit_json(r));
  CHECK(is_fit_json(dir.file("fit.json")));
  const FitResult back = read_fit_json(dir.file("fit.json"), "--fit");
  REQUIRE(back.collectives.size() == 1);
  CHECK(back.collectives[0].alpha_s == r.collectives[0].alpha_s);
  CHECK(back.collectives[0].beta_s_per_byte == r.collectives[0].beta_s_per_byte);

  auto fails_with = [&](const std::string& text, const std::string& expected) {
    write(dir.file("bad.csv"), text);
    CAPTURE(text);
    try {
      fit_files({dir.file("bad.csv")});
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(expected) != std::string::npos);
    }
  };
  fails_with("", "is empty");
  fails_with("a,b,c\n1,2,3\n", "neither a dpx collective --csv file nor a dpx bench results.csv");
  fails_with("{\n  \"dpx_fit\": 1\n}\n", "is JSON, not a CSV file");
  fails_with(kHeader, "no measurements");
  fails_with(with_header("sendrecv,ring,threads,2,4096,1024,float,none,-1,out,-5,1,1,0\n"),
             "is not a positive time");
  fails_with(with_header("sendrecv,ring,threads,2,4096,1024,float,none,-1,out,abc,1,1,0\n"),
             "not a finite number");
  fails_with(with_header("sendrecv,ring,threads,2\n"), "has 4 fields, its header 14");
  CHECK_THROWS_WITH_AS(fit_files({dir.file("missing.csv")}), doctest::Contains("cannot read"), UsageError);
  write(dir.file("not.json"), "{\"x\": 1}");
  CHECK_FALSE(is_fit_json(dir.file("not.json")));
  CHECK_THROWS_WITH_AS(read_fit_json(dir.file("not.json"), "--fit"), doctest::Contains("not a file that dpx fit wrote"),
                       UsageError);
}
