/* Decoder self-attention at one step, read through a row table: eq. (1) for one query per hypothesis.
 *
 * Beam search reorders its hypotheses at every step. Copying every layer's cached keys and values into
 * the new order (t x N x h x d floats, twice a layer) cost 7.5% of int8 beam 4 at batch 32. Instead the
 * cache stays where it was written, and a table says, for each position j and hypothesis n, which
 * row of the buffer holds n's keys and values at j: table[j * R + n]. Reordering gathers the table
 * (t x N integers, shared by every layer); this kernel reads through it.
 *
 * Built on first use by gemv.py with -march=native, linked to the OpenMP runtime PyTorch itself has
 * loaded, and run on torch.get_num_threads() threads, each taking its share of the (row, head) pairs.
 *
 *   q (N, h, d_k); k (capacity, R, h, d_k) and v (capacity, R, h, d_v), positions 0 .. t-1 filled;
 *   table (capacity, R) int64; out (N, h, d_v); scores (N * h * t) scratch; all float32, contiguous.
 *   scale is 1 / sqrt(d_k).
 */

#include <math.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef AIAYN_LIBMVEC
/* glibc's vector expf (libmvec, linked by attend.py where it is there): the softmax's loops are vectorised with it. */
#pragma omp declare simd notinbranch
extern float expf(float);
#endif

/* softmax over s[0 .. n-1] in place; -inf entries get weight 0. */
static inline void softmax(float *s, long n) {
    float top = -INFINITY, sum = 0.f;
    #pragma omp simd reduction(max:top)
    for (long j = 0; j < n; j++) top = s[j] > top ? s[j] : top;
    #pragma omp simd reduction(+:sum)
    for (long j = 0; j < n; j++) { s[j] = expf(s[j] - top); sum += s[j]; }
    float inverse = 1.f / sum;
    #pragma omp simd
    for (long j = 0; j < n; j++) s[j] *= inverse;
}

static inline float dot(const float *restrict a, const float *restrict b, long K) {
    float sum = 0.f;
    #pragma omp simd reduction(+:sum)
    for (long k = 0; k < K; k++) sum += a[k] * b[k];
    return sum;
}

void aiayn_attend_f32(const float *q, const float *k, const float *v, const int64_t *table, float *out, float *scores,
                      long N, long h, long t, long d_k, long d_v, long R, float scale, int threads) {
    long pairs = N * h;
    #pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
        int n_threads = omp_get_num_threads(), me = omp_get_thread_num();
#else
        int n_threads = 1, me = 0;
#endif
        long p0 = pairs * me / n_threads, p1 = pairs * (me + 1) / n_threads;
        /* Q K^T / sqrt(d_k): position by position, so that each pass reads one block of the buffer. */
        for (long j = 0; j < t; j++) {
            const int64_t *rows = table + j * R;
            const float *kj = k + j * R * h * d_k;
            for (long p = p0; p < p1; p++)
                scores[p * t + j] = dot(q + p * d_k, kj + (rows[p / h] * h + p % h) * d_k, d_k) * scale;
        }
        for (long p = p0; p < p1; p++) {  /* softmax over the t positions */
            softmax(scores + p * t, t);
            for (long c = 0; c < d_v; c++) out[p * d_v + c] = 0.f;
        }
        for (long j = 0; j < t; j++) {  /* times V */
            const int64_t *rows = table + j * R;
            const float *vj = v + j * R * h * d_v;
            for (long p = p0; p < p1; p++) {
                const float *restrict row = vj + (rows[p / h] * h + p % h) * d_v;
                float *restrict o = out + p * d_v, w = scores[p * t + j];
                #pragma omp simd
                for (long c = 0; c < d_v; c++) o[c] += w * row[c];
            }
        }
    }
}

/* Encoder-decoder attention at a step: the K hypotheses of sentence b attend as K queries over its S source
 * positions (eq. 1, §3.2.3), those where mask[b * S + j] is 0 (padding) left out. Each (sentence, head) pair's
 * keys and values are one contiguous block, read once for its K queries.
 *
 *   q (B * K, h, d_k); k (B, h, S, d_k), v (B, h, S, d_v); mask (B, S) bytes, 1 = may attend;
 *   out (B * K, h, d_v); scores (B * h * K * S) scratch; float32, contiguous. scale is 1 / sqrt(d_k).
 */
void aiayn_source_attend_f32(const float *q, const float *k, const float *v, const unsigned char *mask, float *out,
                             float *scores, long B, long K, long h, long S, long d_k, long d_v, float scale,
                             int threads) {
    long pairs = B * h;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (long p = 0; p < pairs; p++) {
        long b = p / h, c = p % h;
        const float *kp = k + p * S * d_k, *vp = v + p * S * d_v;
        const unsigned char *m = mask + b * S;
        float *s = scores + p * K * S;  /* (K, S) */
        for (long j = 0; j < S; j++) {  /* each key read once for the K queries */
            for (long i = 0; i < K; i++)
                s[i * S + j] = m[j] ? dot(q + ((b * K + i) * h + c) * d_k, kp + j * d_k, d_k) * scale : -INFINITY;
        }
        for (long i = 0; i < K; i++) {
            softmax(s + i * S, S);
            float *o = out + ((b * K + i) * h + c) * d_v;
            for (long e = 0; e < d_v; e++) o[e] = 0.f;
        }
        for (long j = 0; j < S; j++) {  /* each value read once for the K queries */
            if (!m[j]) continue;  /* padding: weight 0, whatever its value holds */
            const float *restrict vj = vp + j * d_v;
            for (long i = 0; i < K; i++) {
                float *restrict o = out + ((b * K + i) * h + c) * d_v, w = s[i * S + j];
                #pragma omp simd
                for (long e = 0; e < d_v; e++) o[e] += w * vj[e];
            }
        }
    }
}
