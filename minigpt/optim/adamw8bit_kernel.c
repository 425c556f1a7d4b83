/* AdamW8bit's update of whole blocks in one pass over memory: minigpt/optim/adamw8bit.py's fused_update_,
   written by hand for a CPU. minigpt/optim/kernel.py compiles it (cc -O3 -march=native -fopenmp) and calls
   update_tensors once per optimizer step, for every quantized tensor at once.

   Each block of BLOCK values is read once (weight, gradient, both moments' codes and scales), worked on in
   arrays of BLOCK floats that stay in the core's L1 cache, and written once (an fp32 weight is updated in
   place). torch.compile's pass reads the
   chunk twice instead (once for the blocks' largest m and v, once for the rest) and a Python call per chunk
   and tensor precedes each of its loops.

   Its time is arithmetic, not memory: a vector square root or division takes a CPU core several times as
   long as a multiplication, and a value needs four of them (sqrt(v), the weight's division, and m's and v's
   codes). The codes' two square roots need less precision: a code rounds 255 * sqrt(x) to an integer, so
   where the CPU has AVX (every x86 CPU since 2011) code_sqrt takes its 12-bit estimate of 1 / sqrt(x)
   (AVX-512's: 14 bits) and one Newton step, good to about 2^-21 relative: a code can move only where
   255 * sqrt(x) lies within 2.5e-4 of a half-integer (tests/test_optim_kernel.py derives the bound). sqrt(v)
   and the division, which set the weight, are exact. Compiled with -ffp-contract=off, so every other operation
   rounds as written (the two fmaf are where torch's eager lerp_ and addcmul_ fuse a multiply-add too). */

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define BLOCK 256 /* values sharing one scale: adamw8bit.BLOCK */
#define FLOAT32 0 /* the dtypes of a weight or a gradient */
#define BFLOAT16 1

static float bf16_to_float(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16; /* bf16 is the top half of an fp32 */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t float_to_bf16(float f) { /* round to nearest, ties to even, as torch does */
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static void load_bf16(float *out, const void *x) {
    for (int i = 0; i < BLOCK; i++) out[i] = bf16_to_float(((const uint16_t *)x)[i]);
}

static void store_bf16(void *x, const float *values) {
    for (int i = 0; i < BLOCK; i++) ((uint16_t *)x)[i] = float_to_bf16(values[i]);
}

static void code_sqrt(float *x) { /* x = sqrt(x) for BLOCK values in [0, 1], precise enough for a code */
#if defined(__AVX512F__)
    for (int i = 0; i < BLOCK; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 y = _mm512_rsqrt14_ps(v);  /* 1 / sqrt(v) to 14 bits (infinite at 0) */
        __m512 vyy = _mm512_mul_ps(v, _mm512_mul_ps(y, y));  /* Newton: y (3 - v y^2) / 2 */
        y = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), y), _mm512_sub_ps(_mm512_set1_ps(3.0f), vyy));
        __m512 root = _mm512_mul_ps(v, y);  /* sqrt(v) = v / sqrt(v); 0 * infinity at v = 0, so: */
        _mm512_storeu_ps(x + i, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), root));
    }
#elif defined(__AVX__)
    for (int i = 0; i < BLOCK; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 y = _mm256_rsqrt_ps(v);  /* 1 / sqrt(v) to 12 bits (infinite at 0) */
        __m256 vyy = _mm256_mul_ps(v, _mm256_mul_ps(y, y));  /* Newton: y (3 - v y^2) / 2, to 22 bits */
        y = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), y), _mm256_sub_ps(_mm256_set1_ps(3.0f), vyy));
        __m256 root = _mm256_mul_ps(v, y);  /* sqrt(v) = v / sqrt(v); 0 * infinity at v = 0, so: */
        _mm256_storeu_ps(x + i, _mm256_and_ps(root, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)));
    }
#else
    for (int i = 0; i < BLOCK; i++) x[i] = sqrtf(x[i]);
#endif
}

static uint32_t bits(float x) { /* x's 32 bits as an integer */
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* One block. h: decay factor, 1 - beta1, beta2, 1 - beta2, 1 / sqrt(bias correction 2), eps,
   -lr / bias correction 1 (adamw8bit.hyper_parameters). An fp32 weight and gradient are worked on where they
   are; a bf16 one through an fp32 copy (p_copy, g_copy). */
static void update_block(void *param, int param_dtype, const void *grad, int grad_dtype, int8_t *m_codes,
                         float *m_scale, uint8_t *v_codes, float *v_scale, const float *h) {
    float p_copy[BLOCK], g_copy[BLOCK], m[BLOCK], v[BLOCK], root[BLOCK];
    float *restrict p = param_dtype == FLOAT32 ? (float *)param : p_copy;
    const float *restrict g = grad_dtype == FLOAT32 ? (const float *)grad : g_copy;
    if (param_dtype == BFLOAT16) load_bf16(p_copy, param);
    if (grad_dtype == BFLOAT16) load_bf16(g_copy, grad);
    const float m_step = *m_scale * (float)(1.0 / (127.0 * 127.0));  /* decode: q |q| / 127^2 * scale */
    const float v_step = *v_scale * (float)(1.0 / (255.0 * 255.0 * 255.0 * 255.0));  /* q^4 / 255^4 * scale */
    uint32_t m_most = 0, v_most = 0; /* the largest |m| and v, as bits: those of numbers >= 0 order as they do */
    for (int i = 0; i < BLOCK; i++) {
        float qm = (float)m_codes[i], qv = (float)v_codes[i];
        float mi = qm * fabsf(qm) * m_step, qv2 = qv * qv, vi = qv2 * qv2 * v_step;
        mi = fmaf(h[1], g[i] - mi, mi);                   /* m = beta1 m + (1 - beta1) g */
        vi = fmaf(h[3], g[i] * g[i], vi * h[2]);          /* v = beta2 v + (1 - beta2) g^2 */
        root[i] = sqrtf(vi);
        p[i] = p[i] * h[0] + (h[6] * mi) / (root[i] * h[4] + h[5]);  /* decay, then the Adam step */
        m[i] = mi;
        v[i] = vi;
        uint32_t m_bits = bits(mi) & 0x7FFFFFFF, v_bits = bits(vi) & 0x7FFFFFFF; /* the sign bit cleared: |x| */
        m_most = m_bits > m_most ? m_bits : m_most;
        v_most = v_bits > v_most ? v_bits : v_most;
    }
    if (param_dtype == BFLOAT16) store_bf16(param, p_copy);
    /* the new scales: the block's largest |m| and largest v; m's code rounds 127 sqrt(|m| / its scale) and v's
       255 (v / its scale)^(1/4) = 255 sqrt(sqrt(v) / sqrt(its scale)) */
    const float m_largest = from_bits(m_most), v_largest = from_bits(v_most);
    const float m_inverse = 1.0f / fmaxf(m_largest, 1.17549435e-38f);  /* no 0 / 0 in a block of zeros */
    const float v_inverse = 1.0f / sqrtf(fmaxf(v_largest, 1.17549435e-38f));
    for (int i = 0; i < BLOCK; i++) {  /* g_copy is free now */
        g_copy[i] = fabsf(m[i]) * m_inverse;
        v[i] = root[i] * v_inverse;
    }
    code_sqrt(g_copy);
    code_sqrt(v);
    for (int i = 0; i < BLOCK; i++) {
        m_codes[i] = (int8_t)copysignf(rintf(g_copy[i] * 127.0f), m[i]);
        v_codes[i] = (uint8_t)rintf(v[i] * 255.0f);
    }
    *m_scale = m_largest;
    *v_scale = v_largest;
}

/* Every tensor's whole blocks. Tensor t: the addresses of its weight, gradient, m's codes, m's scales, v's codes
   and v's scales at tensors[6 t] to tensors[6 t + 5], its weight's and gradient's dtypes at dtypes[2 t] and
   dtypes[2 t + 1], its number of whole blocks at blocks[t] and its seven numbers at hyper[7 t]. The threads share
   each tensor's blocks (each block is independent of the others) and go on to the next tensor without waiting
   for each other (nowait). */
void update_tensors(int n, void **tensors, const int *dtypes, const int64_t *blocks, const float *hyper, int threads) {
#pragma omp parallel num_threads(threads)
    for (int t = 0; t < n; t++) {
        void **x = tensors + 6 * t;
        const int param_dtype = dtypes[2 * t], grad_dtype = dtypes[2 * t + 1];
        const int64_t param_bytes = param_dtype == BFLOAT16 ? 2 : 4, grad_bytes = grad_dtype == BFLOAT16 ? 2 : 4;
#pragma omp for schedule(static) nowait
        for (int64_t b = 0; b < blocks[t]; b++)
            update_block((char *)x[0] + b * BLOCK * param_bytes, param_dtype,
                         (const char *)x[1] + b * BLOCK * grad_bytes, grad_dtype, (int8_t *)x[2] + b * BLOCK,
                         (float *)x[3] + b, (uint8_t *)x[4] + b * BLOCK, (float *)x[5] + b, hyper + 7 * t);
    }
}
