// llama2c-ref.c: the same-machine C reference of docs/benchmarks/native.md.
//
// It is the forward pass of karpathy/llama2.c run.c (MIT), reproduced for
// timing only: the same matmul (one row at a time, OpenMP over rows),
// rmsnorm, softmax, RoPE with powf/cosf/sinf, per-head attention with
// OpenMP, SwiGLU and shared classifier, on random weights of the benchmark
// shapes (15m, 42m, 110m as in model.Shape). Like BenchmarkForward it times
// 64 decode steps from position 0, the first included.
//
//   gcc -Ofast -march=native -fopenmp -o llama2c-ref llama2c-ref.c -lm
//   OMP_NUM_THREADS=1 taskset -c 0 ./llama2c-ref 42m
//   OMP_NUM_THREADS=2 taskset -c 0,1 ./llama2c-ref 42m
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
typedef struct { int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; } Config;
static float *alloc(size_t n, unsigned long long *s) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; p[i] = ((float)(*s >> 40) / (float)(1ull << 24) - 0.5f) * 0.1f; }
    return p;
}
void rmsnorm(float* o, float* x, float* weight, int size) {
    float ss = 0.0f;
    for (int j = 0; j < size; j++) ss += x[j] * x[j];
    ss /= size; ss += 1e-5f; ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < size; j++) o[j] = weight[j] * (ss * x[j]);
}
void softmax(float* x, int size) {
    float max_val = x[0];
    for (int i = 1; i < size; i++) if (x[i] > max_val) max_val = x[i];
    float sum = 0.0f;
    for (int i = 0; i < size; i++) { x[i] = expf(x[i] - max_val); sum += x[i]; }
    for (int i = 0; i < size; i++) x[i] /= sum;
}
void matmul(float* xout, float* x, float* w, int n, int d) {
    int i;
    #pragma omp parallel for private(i)
    for (i = 0; i < d; i++) {
        float val = 0.0f;
        for (int j = 0; j < n; j++) val += w[i * n + j] * x[j];
        xout[i] = val;
    }
}
int main(int argc, char **argv) {
    Config c;
    if (argc < 2) return 1;
    if (!strcmp(argv[1], "15m")) c = (Config){288, 768, 6, 6, 6, 32000, 2048};
    else if (!strcmp(argv[1], "42m")) c = (Config){512, 1376, 8, 8, 8, 32000, 2048};
    else c = (Config){768, 2048, 12, 12, 12, 32000, 2048};
    unsigned long long s = 88172645463325252ull;
    int dim = c.dim, hd = c.hidden_dim, L = c.n_layers, kv_dim = (c.dim * c.n_kv_heads) / c.n_heads;
    int kv_mul = c.n_heads / c.n_kv_heads, head_size = dim / c.n_heads;
    float *emb = alloc((size_t)c.vocab_size * dim, &s), *rms_att = alloc((size_t)L * dim, &s), *rms_ffn = alloc((size_t)L * dim, &s);
    float *wq = alloc((size_t)L * dim * dim, &s), *wk = alloc((size_t)L * dim * kv_dim, &s), *wv = alloc((size_t)L * dim * kv_dim, &s), *wo = alloc((size_t)L * dim * dim, &s);
    float *w1 = alloc((size_t)L * dim * hd, &s), *w2 = alloc((size_t)L * dim * hd, &s), *w3 = alloc((size_t)L * dim * hd, &s), *rms_final = alloc(dim, &s);
    float *x = calloc(dim, 4), *xb = calloc(dim, 4), *xb2 = calloc(dim, 4), *hb = calloc(hd, 4), *hb2 = calloc(hd, 4), *q = calloc(dim, 4);
    float *key_cache = calloc((size_t)L * c.seq_len * kv_dim, 4), *value_cache = calloc((size_t)L * c.seq_len * kv_dim, 4);
    float *att = calloc((size_t)c.n_heads * c.seq_len, 4), *logits = calloc(c.vocab_size, 4);
    int steps = 64;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int pos = 0; pos < steps; pos++) {
        int token = pos + 5;
        memcpy(x, emb + token * dim, dim * sizeof(float));
        for (int l = 0; l < L; l++) {
            rmsnorm(xb, x, rms_att + l * dim, dim);
            int loff = l * c.seq_len * kv_dim;
            float *k = key_cache + loff + pos * kv_dim, *v = value_cache + loff + pos * kv_dim;
            matmul(q, xb, wq + l * dim * dim, dim, dim);
            matmul(k, xb, wk + l * dim * kv_dim, dim, kv_dim);
            matmul(v, xb, wv + l * dim * kv_dim, dim, kv_dim);
            for (int i = 0; i < dim; i += 2) {
                int head_dim = i % head_size;
                float freq = 1.0f / powf(10000.0f, head_dim / (float)head_size);
                float val = pos * freq, fcr = cosf(val), fci = sinf(val);
                int rotn = i < kv_dim ? 2 : 1;
                for (int vv = 0; vv < rotn; vv++) {
                    float* vec = vv == 0 ? q : k;
                    float v0 = vec[i], v1 = vec[i + 1];
                    vec[i] = v0 * fcr - v1 * fci; vec[i + 1] = v0 * fci + v1 * fcr;
                }
            }
            int h;
            #pragma omp parallel for private(h)
            for (h = 0; h < c.n_heads; h++) {
                float* qh = q + h * head_size;
                float* a = att + h * c.seq_len;
                for (int t = 0; t <= pos; t++) {
                    float* kk = key_cache + loff + t * kv_dim + (h / kv_mul) * head_size;
                    float score = 0.0f;
                    for (int i = 0; i < head_size; i++) score += qh[i] * kk[i];
                    a[t] = score / sqrtf(head_size);
                }
                softmax(a, pos + 1);
                float* o = xb + h * head_size;
                memset(o, 0, head_size * sizeof(float));
                for (int t = 0; t <= pos; t++) {
                    float* vv = value_cache + loff + t * kv_dim + (h / kv_mul) * head_size;
                    for (int i = 0; i < head_size; i++) o[i] += a[t] * vv[i];
                }
            }
            matmul(xb2, xb, wo + l * dim * dim, dim, dim);
            for (int i = 0; i < dim; i++) x[i] += xb2[i];
            rmsnorm(xb, x, rms_ffn + l * dim, dim);
            matmul(hb, xb, w1 + l * dim * hd, dim, hd);
            matmul(hb2, xb, w3 + l * dim * hd, dim, hd);
            for (int i = 0; i < hd; i++) { float val = hb[i]; val *= (1.0f / (1.0f + expf(-val))); hb[i] = val * hb2[i]; }
            matmul(xb, hb, w2 + l * dim * hd, hd, dim);
            for (int i = 0; i < dim; i++) x[i] += xb[i];
        }
        rmsnorm(x, x, rms_final, dim);
        matmul(logits, x, emb, dim, c.vocab_size);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("C %s decode %.1f tok/s (logit0 %g)\n", argv[1], steps / sec, logits[0]);
    return 0;
}
