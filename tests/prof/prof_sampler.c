/* The heap profiler's sampling arithmetic (src/core/prof.c), in a seeded
 * simulation: a stream of allocations of five sizes, counted down to
 * exponential gaps as each thread does; every sampled block adds
 * size * _ts_prof_weight(size) to its size's estimate. Over many runs the
 * mean estimate of each size's bytes must equal the truth within four
 * standard errors (unbiased for 16-byte blocks, far below the rate, and for
 * 4 MiB blocks, always sampled, alike). Also: the gaps' mean and tail, and
 * the logarithm the gaps are drawn with. Deterministic: fixed seeds, no
 * timing.
 */
#include <math.h>

#include "check.h"
#include "core/prof_internal.h"

#define RATE   (512.0 * 1024)
#define SIZES  5
#define TRIALS 2000

static const size_t size_of[SIZES] = {16, 1000, 64 << 10, 512 << 10, 4 << 20};
static const unsigned count_of[SIZES] = {20000, 2000, 200, 40, 5};

static void check_log(void) {
    const double xs[] = {1e-16, 1e-9, 0.001, 0.5, 0.9999, 1, 1.5, 2, 10, 12345.678};
    for (unsigned i = 0; i < sizeof xs / sizeof xs[0]; i++)
        CHECK_MSG(fabs(_ts_prof_log(xs[i]) - log(xs[i])) < 1e-11, "log(%g) = %.15g", xs[i],
                  _ts_prof_log(xs[i]));
    /* weights on both sides of the series' switch at size/rate = 0.5, and far beyond */
    const size_t sizes[] = {1, 16, 4096, 200000, 262143, 262144, 262145, 1 << 20, 100 << 20};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        double w = _ts_prof_weight(sizes[i], RATE), want = -1 / expm1(-(double)sizes[i] / RATE);
        CHECK_MSG(fabs(w - want) <= 1e-12 * want, "weight(%zu) = %.17g, not %.17g", sizes[i], w,
                  want);
    }
}

static void check_gaps(void) {
    uint64_t rng = 12345;
    double sum = 0;
    unsigned beyond = 0, n = 200000;
    for (unsigned i = 0; i < n; i++) {
        int64_t g = _ts_prof_gap(&rng, RATE);
        CHECK(g >= 1);
        sum += (double)g;
        beyond += g > RATE;
    }
    /* mean RATE, sd RATE/sqrt(n); P(gap > RATE) = 1/e, sd sqrt(p(1-p)/n) */
    CHECK_MSG(fabs(sum / n - RATE) < 4 * RATE / sqrt(n), "mean gap %.0f", sum / n);
    double p = (double)beyond / n;
    CHECK_MSG(fabs(p - exp(-1)) < 4 * sqrt(exp(-1) * (1 - exp(-1)) / n), "P(gap > rate) %.4f", p);
    rng = 1;
    for (unsigned i = 0; i < 1000; i++) CHECK(_ts_prof_gap(&rng, 1) == 1);
    CHECK(_ts_prof_weight(100, 1) == 1);
}

static void check_unbiased(void) {
    double sum[SIZES] = {0}, sq[SIZES] = {0};
    uint64_t rng = 0x5eed;
    for (unsigned t = 0; t < TRIALS; t++) {
        double est[SIZES] = {0};
        uint64_t left = (uint64_t)_ts_prof_gap(&rng, RATE);
        unsigned done[SIZES] = {0};
        for (unsigned round = 0; round < count_of[0]; round++) {
            for (unsigned k = 0; k < SIZES; k++) { /* interleaved, as a program mixes them */
                if (done[k] == count_of[k] || round % (count_of[0] / count_of[k])) continue;
                done[k]++;
                uint64_t s = size_of[k];
                if (s < left) {
                    left -= s;
                    continue;
                }
                left = (uint64_t)_ts_prof_gap(&rng, RATE);
                est[k] += (double)s * _ts_prof_weight(s, RATE);
            }
        }
        for (unsigned k = 0; k < SIZES; k++) {
            sum[k] += est[k];
            sq[k] += est[k] * est[k];
        }
    }
    for (unsigned k = 0; k < SIZES; k++) {
        double truth = (double)size_of[k] * count_of[k], mean = sum[k] / TRIALS;
        double sd = sqrt(sq[k] / TRIALS - mean * mean), se = sd / sqrt(TRIALS);
        printf("%8zu B: mean estimate %.0f, truth %.0f, standard error %.0f\n", size_of[k], mean,
               truth, se);
        CHECK_MSG(fabs(mean - truth) <= 4 * se + 1e-9 * truth, "size %zu: biased", size_of[k]);
    }
}

int main(void) {
    check_log();
    check_gaps();
    check_unbiased();
    printf("ok\n");
    return 0;
}
