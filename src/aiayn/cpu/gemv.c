/* y = x W^T + b for the few rows of a decoding step: aiayn's own matrix-vector product.
 *
 * At a step a batch-1 search multiplies 1 to 4 rows by every weight matrix, so the products are
 * bound by reading the matrices from memory. Every weight is read once, row by row as it is stored
 * (W is (N, K), row-major: PyTorch's nn.Linear layout, and the embeddings' rows), and each row of W
 * is multiplied by the M rows of x while it is in the first-level cache: a dot product per output,
 * which the compiler vectorises for the host (omp simd). The other layouts tried (2 or 4 rows of W at
 * a time, x's rows in registers, more partial sums) streamed slower (docs/studies/translation-speed.md).
 *
 * Built on first use by gemv.py with -march=native, linked to the OpenMP runtime PyTorch itself has
 * loaded, and run on torch.get_num_threads() threads.
 *
 *   x (M, K), W (N, K), b (N) or NULL, y (M, N): float32, contiguous.
 */

static inline float dot(const float *restrict w, const float *restrict x, long K) {
    float sum = 0.f;
    #pragma omp simd reduction(+:sum)
    for (long k = 0; k < K; k++) sum += w[k] * x[k];
    return sum;
}

#define BLOCK 16 /* rows of W a thread takes at a time */

void aiayn_gemv_f32(const float *x, const float *W, const float *b, float *y, long M, long N, long K, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (long n0 = 0; n0 < N; n0 += BLOCK) {
        long n1 = n0 + BLOCK < N ? n0 + BLOCK : N;
        for (long n = n0; n < n1; n++)
            for (long m = 0; m < M; m++)
                y[m * N + n] = dot(W + n * K, x + m * K, K) + (b ? b[n] : 0.f);
    }
}

/* Greedy search's pick (greedy.py): the largest value of each of N rows of V floats and its column, as
 * torch.max(x, dim=1) gives them: the first column among equals, and a NaN counted the largest (the first NaN).
 * One vectorised pass for the maximum, then the first block of 64 that holds it (vectorised too), then that
 * block, rather than a plain search for the first equal (docs/studies/translation-speed.md, "Greedy's pick in C").
 *
 *   x (N, V) float32, contiguous; best (N) float32, column (N) int64; from 8 rows on, the rows on `threads` threads.
 */
#define PICK_BLOCK 64

void aiayn_argmax_f32(const float *x, long N, long V, float *best, long *column, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads) if (N >= 8)
    for (long n = 0; n < N; n++) {
        const float *row = x + n * V;
        float m = -__builtin_inff();
        int nan = 0;
        #pragma omp simd reduction(max:m) reduction(|:nan)
        for (long v = 0; v < V; v++) {
            float r = row[v];
            m = r > m ? r : m;
            nan |= r != r;
        }
        long at = 0;
        if (nan) {
            for (long v = 0; v < V; v++)
                if (row[v] != row[v]) { at = v; break; }
        } else {
            long start = 0;
            for (; start + PICK_BLOCK <= V; start += PICK_BLOCK) {
                int hit = 0;
                #pragma omp simd reduction(|:hit)
                for (long v = start; v < start + PICK_BLOCK; v++) hit |= row[v] == m;
                if (hit) break;
            }
            for (long v = start; v < V; v++)
                if (row[v] == m) { at = v; break; }
        }
        best[n] = row[at];
        column[n] = at;
    }
}
