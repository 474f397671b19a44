// Lloyd–Max iteration for the sphere-coordinate density, in double.
//
// Numerics. With t = sin θ the density becomes f(t) dt ∝ cos^(d−2) θ dθ on (−π/2, π/2): smooth
// for every d >= 2, so the integrable singularities at t = ±1 for d = 2 (arcsine) and the steep
// edges for small d disappear. Per cell [a, b] (0 <= a < b <= 1):
//   mass   M0 = ∫ cos^n θ dθ over [asin a, asin b], n = d − 2: composite 16-point Gauss–Legendre
//              on panels no wider than 1/√n (the width of the bump cos^n θ ≈ exp(−n θ²/2)),
//              which is exact to rounding for these analytic integrands;
//   moment M1 = ∫ t f dt = ((1 − a²)^((d−1)/2) − (1 − b²)^((d−1)/2)) / (d − 1): closed form.
// The integrand past θ_cut = √(120/n) is below e^-60 of its peak (cos θ <= exp(−θ²/2) on
// [0, π/2]), so the outermost cell is integrated up to θ_cut only.
// Symmetry: only the centroids in (0, 1) are iterated; for odd K the middle one is exactly 0.
// Convergence: Lloyd steps accelerated by Newton steps (see below) until the last step moves no
// centroid by more than 1e-12; Newton/Lloyd and plain Lloyd (thousands of steps) agree to ~1e-14.
#include "engine/kv/lloyd_max.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace tq {
namespace {

constexpr int kGaussPoints = 16;
constexpr double kTolerance = 1e-12;  // max centroid move (in t) by the last step
constexpr int kMaxIterations = 100000;

struct GaussLegendre {
  std::array<double, kGaussPoints> x{};  // nodes on [−1, 1]
  std::array<double, kGaussPoints> w{};
};

// Nodes and weights by Newton's method on the Legendre polynomial P_n (deterministic).
GaussLegendre MakeGaussLegendre() {
  GaussLegendre gl;
  const int n = kGaussPoints;
  for (int i = 0; i < (n + 1) / 2; ++i) {
    double z = std::cos(std::numbers::pi * (i + 0.75) / (n + 0.5));
    double dp = 0;
    for (int it = 0; it < 100; ++it) {
      double p0 = 1, p1 = 0;
      for (int k = 1; k <= n; ++k) {
        const double p2 = p1;
        p1 = p0;
        p0 = ((2.0 * k - 1) * z * p1 - (k - 1.0) * p2) / k;
      }
      dp = n * (z * p0 - p1) / (z * z - 1);
      const double dz = p0 / dp;
      z -= dz;
      if (std::abs(dz) < 1e-16) break;
    }
    gl.x[i] = -z;
    gl.x[n - 1 - i] = z;
    gl.w[i] = gl.w[n - 1 - i] = 2 / ((1 - z * z) * dp * dp);
  }
  return gl;
}

const GaussLegendre& Gauss() {
  static const GaussLegendre gl = MakeGaussLegendre();
  return gl;
}

class SphereCoordinateDensity {
 public:
  explicit SphereCoordinateDensity(int32_t d)
      : n_(d - 2),
        panel_(n_ > 1 ? 1 / std::sqrt(static_cast<double>(n_)) : 1.0),
        theta_cut_(n_ > 0 ? std::min(std::numbers::pi / 2, std::sqrt(120.0 / n_))
                          : std::numbers::pi / 2) {}

  // Unnormalized mass ∫_a^b f(t) dt, 0 <= a < b <= 1.
  double Mass(double a, double b) const {
    const double ta = std::asin(a);
    double tb = std::asin(b);
    if (ta < theta_cut_) tb = std::min(tb, theta_cut_);
    if (!(tb > ta)) return 0;
    const int panels = static_cast<int>(std::ceil((tb - ta) / panel_));
    const double h = (tb - ta) / panels;
    const GaussLegendre& gl = Gauss();
    double sum = 0;
    for (int p = 0; p < panels; ++p) {
      const double mid = ta + (p + 0.5) * h;
      double s = 0;
      for (int k = 0; k < kGaussPoints; ++k) {
        s += gl.w[k] * std::pow(std::cos(mid + 0.5 * h * gl.x[k]), n_);
      }
      sum += s * 0.5 * h;
    }
    return sum;
  }

  // Unnormalized density (1 − t²)^((d−3)/2), 0 <= t < 1 (same normalization as Mass).
  double Pdf(double t) const { return std::pow((1 - t) * (1 + t), 0.5 * (n_ - 1)); }

  // Unnormalized first moment ∫_a^b t f(t) dt, 0 <= a < b <= 1 (same normalization as Mass).
  double Moment(double a, double b) const { return (CosPow(a) - CosPow(b)) / (n_ + 1); }

 private:
  // (1 − t²)^((n+1)/2) = cos^(n+1) θ.
  double CosPow(double t) const { return std::pow(std::sqrt((1 - t) * (1 + t)), n_ + 1); }

  int32_t n_;
  double panel_;
  double theta_cut_;
};

}  // namespace

ScalarCodebook SphereCoordinateCodebook(int32_t head_dim, int32_t levels) {
  if (head_dim < 2) {
    throw std::invalid_argument("SphereCoordinateCodebook: head_dim must be >= 2, got " +
                                std::to_string(head_dim));
  }
  if (levels < 2 || levels > 256) {
    throw std::invalid_argument("SphereCoordinateCodebook: levels must be in [2, 256], got " +
                                std::to_string(levels));
  }
  const SphereCoordinateDensity density(head_dim);
  const bool odd = levels % 2 == 1;
  const int half = levels / 2;  // centroids in (0, 1)

  // Start from evenly spaced centroids over about ±2.5 standard deviations (1/√d), inside (−1, 1).
  const double scale = std::min(0.95, 2.5 / std::sqrt(static_cast<double>(head_dim)));
  std::vector<double> c(half), edges(half + 1), mass(half);
  for (int j = 0; j < half; ++j) {
    const int i = levels - half + j;  // index in the full codebook
    c[j] = scale * ((2.0 * i + 1) / levels - 1);
  }
  auto edges_of = [&](const std::vector<double>& x, std::vector<double>* e) {
    (*e)[0] = odd ? 0.5 * x[0] : 0.0;
    for (int j = 1; j < half; ++j) (*e)[j] = 0.5 * (x[j - 1] + x[j]);
    (*e)[half] = 1;
  };
  // One Lloyd step from x: t = conditional means of the cells bounded by the midpoints of x.
  // Optionally the Jacobian dt/dx (tridiagonal: a cell's mean depends on its two edges,
  // d mean / d edge = ±f(edge) (edge − mean) / mass, and each edge is the midpoint of two
  // centroids).
  std::vector<double> lower(half), diag(half), upper(half);
  auto lloyd_step = [&](const std::vector<double>& x, std::vector<double>* t, bool jacobian) {
    edges_of(x, &edges);
    for (int j = 0; j < half; ++j) {
      const double a = edges[j], b = edges[j + 1];
      mass[j] = density.Mass(a, b);
      // A cell too far in the tail to hold any representable mass keeps its midpoint.
      (*t)[j] = mass[j] > 0 ? density.Moment(a, b) / mass[j] : 0.5 * (a + b);
      if (!jacobian) continue;
      const double d_lo = mass[j] > 0 ? density.Pdf(a) * ((*t)[j] - a) / mass[j] : 0;
      const double d_hi = mass[j] > 0 ? density.Pdf(b) * (b - (*t)[j]) / mass[j] : 0;
      const bool lo_moves = j > 0 || odd, hi_moves = j + 1 < half;
      lower[j] = j > 0 ? 0.5 * d_lo : 0;
      diag[j] = (lo_moves ? 0.5 * d_lo : 0) + (hi_moves ? 0.5 * d_hi : 0);
      upper[j] = hi_moves ? 0.5 * d_hi : 0;
    }
  };
  auto max_abs_diff = [&](const std::vector<double>& x, const std::vector<double>& y) {
    double m = 0;
    for (int j = 0; j < half; ++j) m = std::max(m, std::abs(x[j] - y[j]));
    return m;
  };

  // Lloyd's iteration converges for this log-concave density but only linearly (hundreds of
  // steps for 16 levels), so each step also proposes a Newton step on x − T(x) = 0 with the exact
  // Jacobian and takes it when it is valid (sorted, inside (0, 1)) and lowers the residual; near
  // the fixed point that converges quadratically. Plain Lloyd steps remain the fallback.
  std::vector<double> t(half), newton(half), t_newton(half), rhs(half), cp(half);
  for (int it = 0; it < kMaxIterations; ++it) {
    lloyd_step(c, &t, /*jacobian=*/true);
    const double residual = max_abs_diff(t, c);
    // Solve (J − I) δ = c − t (Thomas algorithm); the Newton point is c + δ.
    bool ok = true;
    for (int j = 0; j < half && ok; ++j) {
      const double b = diag[j] - 1 - (j > 0 ? lower[j] * cp[j - 1] : 0);
      if (!(std::abs(b) > 1e-300)) ok = false;
      cp[j] = upper[j] / b;
      rhs[j] = ((c[j] - t[j]) - (j > 0 ? lower[j] * rhs[j - 1] : 0)) / b;
    }
    double step = 0;
    if (ok) {
      for (int j = half - 1; j >= 0; --j) {
        const double delta = rhs[j] - (j + 1 < half ? cp[j] * rhs[j + 1] : 0);
        rhs[j] = delta;
        newton[j] = c[j] + delta;
        step = std::max(step, std::abs(delta));
        if (!(newton[j] > 0 && newton[j] < 1)) ok = false;
      }
      for (int j = 1; j < half && ok; ++j) ok = newton[j] > newton[j - 1];
    }
    if (ok) {
      lloyd_step(newton, &t_newton, /*jacobian=*/false);
      if (max_abs_diff(t_newton, newton) < residual) {
        c.swap(newton);
        if (step <= kTolerance) break;
        continue;
      }
    }
    c.swap(t);
    if (residual <= kTolerance) break;
  }
  edges_of(c, &edges);

  // Cell probabilities (normalized by the integral over the whole line) and the distortion
  // E[t²] − Σ P_i c_i², exact for centroids that are the cells' conditional means; E[t²] = 1/d.
  double half_total = edges[0] > 0 ? density.Mass(0, edges[0]) : 0;  // half the middle cell
  for (int j = 0; j < half; ++j) {
    mass[j] = density.Mass(edges[j], edges[j + 1]);
    half_total += mass[j];
  }
  double second_moment = 0;
  for (int j = 0; j < half; ++j) second_moment += 2 * (0.5 * mass[j] / half_total) * c[j] * c[j];

  ScalarCodebook cb;
  cb.mse = 1.0 / head_dim - second_moment;
  cb.centroids.resize(levels);
  for (int j = 0; j < half; ++j) {
    cb.centroids[levels - half + j] = static_cast<float>(c[j]);
    cb.centroids[half - 1 - j] = static_cast<float>(-c[j]);
  }
  if (odd) cb.centroids[half] = 0.0f;
  cb.boundaries.resize(levels - 1);
  for (int i = 0; i + 1 < levels; ++i) {
    // Midpoints of the float centroids, so that NearestCentroid picks the nearest stored value.
    cb.boundaries[i] = static_cast<float>(
        0.5 * (static_cast<double>(cb.centroids[i]) + static_cast<double>(cb.centroids[i + 1])));
  }
  return cb;
}

uint8_t NearestCentroid(const ScalarCodebook& cb, float x) {
  const auto it = std::upper_bound(cb.boundaries.begin(), cb.boundaries.end(), x);
  return static_cast<uint8_t>(it - cb.boundaries.begin());
}

}  // namespace tq
