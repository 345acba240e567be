// reprise's kernels for the OpenCL backend: every accel.Op, plus the copy
// kernels graphs record. Semantics are accel/kernels.go's.
//
// Rules every kernel keeps, so that results are deterministic and a row's
// result never depends on the batch it came in:
//   - one work-item computes each output element (or each output row) on its
//     own, in a fixed sequential order, with no reduction across work-items;
//   - no contraction of a*b+c into a fused multiply-add (FP_CONTRACT OFF), so
//     products are rounded before they are added, as on the CPU device,
//     except in the float32 and bf16 matmuls, which call fma() (correctly
//     rounded, as the CPU device's fused matmuls are);
//   - every buffer comes with an element offset (buffers are views into the
//     allocator's segments) and every launch is rounded up to whole
//     work-groups, so each kernel checks its index against its size.
#pragma OPENCL FP_CONTRACT OFF

inline float bf16_to_float(ushort u) { return as_float(((uint)u) << 16); }

__kernel void k_fill(__global uint* out, ulong oo, ulong n, uint v) {
	size_t i = get_global_id(0);
	if (i >= n) return;
	out[oo + i] = v;
}

// Rows of table chosen by ids; an id outside [0, v) gives a zero row. Also
// OpGatherRows (x for table, idx for ids).
__kernel void k_embed_f32(__global float* out, ulong oo, __global const float* tab, ulong to,
                          __global const int* ids, ulong io, int t, int d, int v) {
	size_t g = get_global_id(0);
	if (g >= (size_t)t * (size_t)d) return;
	size_t row = g / (size_t)d, j = g % (size_t)d;
	int id = ids[io + row];
	float x = 0.0f;
	if (id >= 0 && id < v) x = tab[to + (size_t)id * (size_t)d + j];
	out[oo + g] = x;
}

__kernel void k_embed_bf16(__global float* out, ulong oo, __global const ushort* tab, ulong to,
                           __global const int* ids, ulong io, int t, int d, int v) {
	size_t g = get_global_id(0);
	if (g >= (size_t)t * (size_t)d) return;
	size_t row = g / (size_t)d, j = g % (size_t)d;
	int id = ids[io + row];
	float x = 0.0f;
	if (id >= 0 && id < v) x = bf16_to_float(tab[to + (size_t)id * (size_t)d + j]);
	out[oo + g] = x;
}

// One work-item per row; out may be x (each element is read before it is
// written, by the same work-item).
__kernel void k_rmsnorm(__global float* out, ulong oo, __global const float* x, ulong xo,
                        __global const float* w, ulong wo, int t, int d, float eps) {
	size_t r = get_global_id(0);
	if (r >= (size_t)t) return;
	__global const float* xr = x + xo + r * (size_t)d;
	__global float* orow = out + oo + r * (size_t)d;
	__global const float* wr = w + wo;
	float ss = 0.0f;
	for (int j = 0; j < d; j++) {
		float v = xr[j];
		ss += v * v;
	}
	ss /= (float)d;
	ss += eps;
	ss = 1.0f / sqrt(ss);
	for (int j = 0; j < d; j++) {
		orow[j] = wr[j] * (ss * xr[j]);
	}
}

// y[t,o] = sum_i x[t,i]*w[o,i], one work-item per output, summed in order,
// each term a fused multiply-add (the CPU device's bits).
__kernel void k_matmul_f32(__global float* y, ulong yo, __global const float* x, ulong xo,
                           __global const float* w, ulong wo, int t, int nin, int nout) {
	size_t g = get_global_id(0);
	if (g >= (size_t)t * (size_t)nout) return;
	size_t r = g / (size_t)nout, o = g % (size_t)nout;
	__global const float* xr = x + xo + r * (size_t)nin;
	__global const float* wr = w + wo + o * (size_t)nin;
	float s = 0.0f;
	for (int i = 0; i < nin; i++) {
		s = fma(xr[i], wr[i], s);
	}
	y[yo + g] = s;
}

__kernel void k_matmul_bf16(__global float* y, ulong yo, __global const float* x, ulong xo,
                            __global const ushort* w, ulong wo, int t, int nin, int nout) {
	size_t g = get_global_id(0);
	if (g >= (size_t)t * (size_t)nout) return;
	size_t r = g / (size_t)nout, o = g % (size_t)nout;
	__global const float* xr = x + xo + r * (size_t)nin;
	__global const ushort* wr = w + wo + o * (size_t)nin;
	float s = 0.0f;
	for (int i = 0; i < nin; i++) {
		s = fma(xr[i], bf16_to_float(wr[i]), s);
	}
	y[yo + g] = s;
}

// Quantized weights (ggml's blocks, addressed in bytes): each work-item
// dequantises its output's row block by block, exactly as ggml's
// dequantize_row_* does, and sums x·w in input order, as k_matmul_f32.

inline ushort rd16(__global const uchar* p) { return (ushort)p[0] | ((ushort)p[1] << 8); }

// IEEE half to float, exact (subnormals as m·2^-24).
inline float h2f(ushort h) {
	uint s = ((uint)h & 0x8000u) << 16, e = ((uint)h >> 10) & 0x1fu, m = (uint)h & 0x3ffu;
	if (e == 0) return as_float(s | as_uint((float)m * 5.9604644775390625e-8f));
	if (e == 31) return as_float(s | 0x7f800000u | (m << 13));
	return as_float(s | ((e + 112u) << 23) | (m << 13));
}

#define QMM_HEAD(BLOCK, BYTES) \
	size_t g = get_global_id(0); \
	if (g >= (size_t)t * (size_t)nout) return; \
	size_t r = g / (size_t)nout, o = g % (size_t)nout; \
	__global const float* xr = x + xo + r * (size_t)nin; \
	__global const uchar* wr = w + wo + o * (size_t)(nin / BLOCK) * BYTES; \
	float s = 0.0f;

__kernel void k_matmul_q8_0(__global float* y, ulong yo, __global const float* x, ulong xo,
                            __global const uchar* w, ulong wo, int t, int nin, int nout) {
	QMM_HEAD(32, 34)
	for (int b = 0; b < nin / 32; b++) {
		__global const uchar* blk = wr + b * 34;
		float d = h2f(rd16(blk));
		for (int j = 0; j < 32; j++) s += xr[b * 32 + j] * ((float)(char)blk[2 + j] * d);
	}
	y[yo + g] = s;
}

__kernel void k_matmul_q4_0(__global float* y, ulong yo, __global const float* x, ulong xo,
                            __global const uchar* w, ulong wo, int t, int nin, int nout) {
	QMM_HEAD(32, 18)
	for (int b = 0; b < nin / 32; b++) {
		__global const uchar* blk = wr + b * 18;
		float d = h2f(rd16(blk));
		for (int j = 0; j < 16; j++) s += xr[b * 32 + j] * ((float)((int)(blk[2 + j] & 15) - 8) * d);
		for (int j = 0; j < 16; j++) s += xr[b * 32 + 16 + j] * ((float)((int)(blk[2 + j] >> 4) - 8) * d);
	}
	y[yo + g] = s;
}

inline void scale_min_k4(int j, __global const uchar* q, float* sc, float* m) {
	if (j < 4) {
		*sc = (float)(q[j] & 63); *m = (float)(q[j + 4] & 63);
	} else {
		*sc = (float)((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
		*m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

__kernel void k_matmul_q4_k(__global float* y, ulong yo, __global const float* x, ulong xo,
                            __global const uchar* w, ulong wo, int t, int nin, int nout) {
	QMM_HEAD(256, 144)
	for (int b = 0; b < nin / 256; b++) {
		__global const uchar* blk = wr + b * 144;
		float d = h2f(rd16(blk)), dmin = h2f(rd16(blk + 2));
		__global const float* xb = xr + b * 256;
		for (int c = 0; c < 4; c++) {
			__global const uchar* q = blk + 16 + 32 * c;
			float sc, m;
			scale_min_k4(2 * c, blk + 4, &sc, &m);
			float d1 = d * sc, m1 = dmin * m;
			for (int l = 0; l < 32; l++) s += xb[64 * c + l] * (d1 * (float)(q[l] & 15) - m1);
			scale_min_k4(2 * c + 1, blk + 4, &sc, &m);
			float d2 = d * sc, m2 = dmin * m;
			for (int l = 0; l < 32; l++) s += xb[64 * c + 32 + l] * (d2 * (float)(q[l] >> 4) - m2);
		}
	}
	y[yo + g] = s;
}

__kernel void k_matmul_q6_k(__global float* y, ulong yo, __global const float* x, ulong xo,
                            __global const uchar* w, ulong wo, int t, int nin, int nout) {
	QMM_HEAD(256, 210)
	for (int b = 0; b < nin / 256; b++) {
		__global const uchar* blk = wr + b * 210;
		float d = h2f(rd16(blk + 208));
		__global const float* xb = xr + b * 256;
		for (int e = 0; e < 256; e++) {
			int n = e / 128, k = (e % 128) / 32, l = e % 32;
			uchar ql = blk[64 * n + 32 * (k & 1) + l], qh = blk[128 + 32 * n + l];
			int q = (int)((k < 2 ? (ql & 15) : (ql >> 4)) | (((qh >> (2 * k)) & 3) << 4)) - 32;
			s += xb[e] * (d * (float)(char)blk[192 + e / 16] * (float)q);
		}
	}
	y[yo + g] = s;
}

// One work-item per (token, pair): rotates pair (i, i+1) of every head of q
// and k. freq holds the hd/2 frequencies, computed on the host as
// accel.RoPEFreq does.
__kernel void k_rope(__global float* q, ulong qo, __global float* k, ulong ko,
                     __global const int* pos, ulong po, __global const float* freq,
                     int t, int hd, int qc, int kc) {
	size_t g = get_global_id(0);
	int pairs = hd / 2;
	if (g >= (size_t)t * (size_t)pairs) return;
	size_t r = g / (size_t)pairs;
	int i = 2 * (int)(g % (size_t)pairs);
	float val = (float)pos[po + r] * freq[i / 2];
	float fcr = cos(val);
	float fci = sin(val);
	__global float* qr = q + qo + r * (size_t)qc;
	for (int h = 0; h + hd <= qc; h += hd) {
		float v0 = qr[h + i], v1 = qr[h + i + 1];
		qr[h + i] = v0 * fcr - v1 * fci;
		qr[h + i + 1] = v0 * fci + v1 * fcr;
	}
	__global float* kr = k + ko + r * (size_t)kc;
	for (int h = 0; h + hd <= kc; h += hd) {
		float v0 = kr[h + i], v1 = kr[h + i + 1];
		kr[h + i] = v0 * fcr - v1 * fci;
		kr[h + i + 1] = v0 * fci + v1 * fcr;
	}
}

// OpRoPETable: k_rope with the frequencies of the call's operand (freq, at
// element offset fo) and the pair layout: halves = 0 pairs (2i, 2i+1),
// halves = 1 pairs (i, i+hd/2). One work-item per (token, pair).
__kernel void k_rope_table(__global float* q, ulong qo, __global float* k, ulong ko,
                           __global const int* pos, ulong po, __global const float* freq, ulong fo,
                           int t, int hd, int qc, int kc, int halves) {
	size_t g = get_global_id(0);
	int pairs = hd / 2;
	if (g >= (size_t)t * (size_t)pairs) return;
	size_t r = g / (size_t)pairs;
	int p = (int)(g % (size_t)pairs);
	int i0 = halves ? p : 2 * p;
	int i1 = halves ? p + pairs : 2 * p + 1;
	float val = (float)pos[po + r] * freq[fo + p];
	float fcr = cos(val);
	float fci = sin(val);
	__global float* qr = q + qo + r * (size_t)qc;
	for (int h = 0; h + hd <= qc; h += hd) {
		float v0 = qr[h + i0], v1 = qr[h + i1];
		qr[h + i0] = v0 * fcr - v1 * fci;
		qr[h + i1] = v0 * fci + v1 * fcr;
	}
	__global float* kr = k + ko + r * (size_t)kc;
	for (int h = 0; h + hd <= kc; h += hd) {
		float v0 = kr[h + i0], v1 = kr[h + i1];
		kr[h + i0] = v0 * fcr - v1 * fci;
		kr[h + i1] = v0 * fci + v1 * fcr;
	}
}

// KV caches are float (F32) or half (F16). kv_load and kv_store reach a cache
// as untyped global memory by element index, f16 a constant in each kernel,
// so that the F32 and F16 kernels share one body and its arithmetic: attention
// over an F16 cache is attention over an F32 cache of the widened values, bit
// for bit. F16 uses OpenCL C's core vload_half (exact widening) and
// vstore_half_rte (nearest, ties to even; beyond binary16's range an
// infinity), so it needs no cl_khr_fp16. A NaN, whose binary16 bits
// vstore_half_rte leaves to the implementation, is stored as
// quant.FloatToHalf stores it: quiet, its sign and top mantissa bits kept.
inline float kv_load(__global const void* c, size_t i, int f16) {
	if (f16) return vload_half(i, (__global const half*)c);
	return ((__global const float*)c)[i];
}

inline void kv_store(__global void* c, size_t i, float x, int f16) {
	if (!f16) {
		((__global float*)c)[i] = x;
	} else if (isnan(x)) {
		uint b = as_uint(x);
		((__global ushort*)c)[i] = (ushort)(((b >> 16) & 0x8000u) | 0x7e00u | ((b >> 13) & 0x3ffu));
	} else {
		vstore_half_rte(x, i, (__global half*)c);
	}
}

// One work-item per token; a slot outside [0, s) writes nothing. Cache
// offsets count cache elements (4 bytes for F32, 2 for F16).
inline void kv_write(__global void* kc, ulong kco, __global void* vc, ulong vco,
                     __global const float* k, ulong ko, __global const float* v, ulong vo,
                     __global const int* slots, ulong so, int t, int kd, int vd, int s, int f16) {
	size_t r = get_global_id(0);
	if (r >= (size_t)t) return;
	int slot = slots[so + r];
	if (slot < 0 || slot >= s) return;
	for (int j = 0; j < kd; j++) kv_store(kc, kco + (size_t)slot * (size_t)kd + j, k[ko + r * (size_t)kd + j], f16);
	for (int j = 0; j < vd; j++) kv_store(vc, vco + (size_t)slot * (size_t)vd + j, v[vo + r * (size_t)vd + j], f16);
}

__kernel void k_kv_write(__global float* kc, ulong kco, __global float* vc, ulong vco,
                         __global const float* k, ulong ko, __global const float* v, ulong vo,
                         __global const int* slots, ulong so, int t, int kd, int vd, int s) {
	kv_write(kc, kco, vc, vco, k, ko, v, vo, slots, so, t, kd, vd, s, 0);
}

__kernel void k_kv_write_f16(__global half* kc, ulong kco, __global half* vc, ulong vco,
                             __global const float* k, ulong ko, __global const float* v, ulong vo,
                             __global const int* slots, ulong so, int t, int kd, int vd, int s) {
	kv_write(kc, kco, vc, vco, k, ko, v, vo, slots, so, t, kd, vd, s, 1);
}

// One work-item per (token, head). The softmax is sequential over positions,
// in the CPU device's order: scores s/scale, max, sum of exp(s - max), then
// out += (exp(s - max) / sum) * v position by position. Scores are recomputed
// in each pass (the same operations, so the same bits) instead of stored.
inline void attention(__global float* out, ulong oo, __global const float* q, ulong qo,
                      __global const void* kc, ulong kco, __global const void* vc, ulong vco,
                      __global const int* rows, ulong ro, __global const int* pos, ulong po,
                      __global const int* pages, ulong pgo,
                      int t, int nh, int nkv, int hd, int page, int nrows, int ppr, int nslots, int f16) {
	size_t g = get_global_id(0);
	if (g >= (size_t)t * (size_t)nh) return;
	size_t tok = g / (size_t)nh;
	int h = (int)(g % (size_t)nh);
	__global float* dst = out + oo + tok * (size_t)nh * (size_t)hd + (size_t)h * (size_t)hd;
	for (int i = 0; i < hd; i++) dst[i] = 0.0f;
	int r = rows[ro + tok];
	int n = pos[po + tok] + 1;
	if (r < 0 || r >= nrows || n <= 0 || n > ppr * page) return;
	__global const int* pt = pages + pgo + (size_t)r * (size_t)ppr;
	int npages = nslots / page;
	for (int p = 0; p < (n + page - 1) / page; p++) {
		if (pt[p] < 0 || pt[p] >= npages) return;
	}
	__global const float* qh = q + qo + tok * (size_t)nh * (size_t)hd + (size_t)h * (size_t)hd;
	size_t kvd = (size_t)nkv * (size_t)hd;
	size_t koff = (size_t)(h / (nh / nkv)) * (size_t)hd;
	float scale = sqrt((float)hd);
	float m = 0.0f;
	for (int p = 0; p < n; p++) {
		size_t slot = (size_t)pt[p / page] * (size_t)page + (size_t)(p % page);
		size_t kb = kco + slot * kvd + koff;
		float s = 0.0f;
		for (int i = 0; i < hd; i++) s += qh[i] * kv_load(kc, kb + i, f16);
		s = s / scale;
		if (p == 0 || s > m) m = s;
	}
	float sum = 0.0f;
	for (int p = 0; p < n; p++) {
		size_t slot = (size_t)pt[p / page] * (size_t)page + (size_t)(p % page);
		size_t kb = kco + slot * kvd + koff;
		float s = 0.0f;
		for (int i = 0; i < hd; i++) s += qh[i] * kv_load(kc, kb + i, f16);
		s = s / scale;
		sum += exp(s - m);
	}
	for (int p = 0; p < n; p++) {
		size_t slot = (size_t)pt[p / page] * (size_t)page + (size_t)(p % page);
		size_t kb = kco + slot * kvd + koff;
		size_t vb = vco + slot * kvd + koff;
		float s = 0.0f;
		for (int i = 0; i < hd; i++) s += qh[i] * kv_load(kc, kb + i, f16);
		s = s / scale;
		float a = exp(s - m) / sum;
		for (int i = 0; i < hd; i++) dst[i] += a * kv_load(vc, vb + i, f16);
	}
}

__kernel void k_attention(__global float* out, ulong oo, __global const float* q, ulong qo,
                          __global const float* kc, ulong kco, __global const float* vc, ulong vco,
                          __global const int* rows, ulong ro, __global const int* pos, ulong po,
                          __global const int* pages, ulong pgo,
                          int t, int nh, int nkv, int hd, int page, int nrows, int ppr, int nslots) {
	attention(out, oo, q, qo, kc, kco, vc, vco, rows, ro, pos, po, pages, pgo, t, nh, nkv, hd, page, nrows, ppr, nslots, 0);
}

__kernel void k_attention_f16(__global float* out, ulong oo, __global const float* q, ulong qo,
                              __global const half* kc, ulong kco, __global const half* vc, ulong vco,
                              __global const int* rows, ulong ro, __global const int* pos, ulong po,
                              __global const int* pages, ulong pgo,
                              int t, int nh, int nkv, int hd, int page, int nrows, int ppr, int nslots) {
	attention(out, oo, q, qo, kc, kco, vc, vco, rows, ro, pos, po, pages, pgo, t, nh, nkv, hd, page, nrows, ppr, nslots, 1);
}

// out may be a or b: each element is read before it is written, by the same
// work-item.
__kernel void k_silu_mul(__global float* out, ulong oo, __global const float* a, ulong ao,
                         __global const float* b, ulong bo, ulong n) {
	size_t i = get_global_id(0);
	if (i >= n) return;
	float v = a[ao + i];
	float bv = b[bo + i];
	v = v * (1.0f / (1.0f + exp(-v)));
	out[oo + i] = v * bv;
}

__kernel void k_add(__global float* out, ulong oo, __global const float* a, ulong ao,
                    __global const float* b, ulong bo, ulong n) {
	size_t i = get_global_id(0);
	if (i >= n) return;
	float x = a[ao + i];
	float y = b[bo + i];
	out[oo + i] = x + y;
}

// OpAddRow: out[i] = x[i] + b[i % n], n the row length; out may be x.
__kernel void k_add_row(__global float* out, ulong oo, __global const float* x, ulong xo,
                        __global const float* b, ulong bo, ulong total, ulong n) {
	size_t i = get_global_id(0);
	if (i >= total) return;
	float v = x[xo + i];
	float y = b[bo + i % n];
	out[oo + i] = v + y;
}

inline int row_argmax(__global const float* row, int v) {
	int best = 0;
	float bv = row[0];
	for (int i = 1; i < v; i++) {
		if (row[i] > bv) {
			best = i;
			bv = row[i];
		}
	}
	return best;
}

__kernel void k_argmax(__global int* out, ulong oo, __global const float* x, ulong xo, int r, int v) {
	size_t row = get_global_id(0);
	if (row >= (size_t)r) return;
	out[oo + row] = row_argmax(x + xo + row * (size_t)v, v);
}

// k_logprobs: accel.OpLogProbs, one work-item per row: the log-softmax
// (max, then the sum of exponentials in float), the token's, and the top k
// by one pass keeping a sorted list in ids (equal values: lower token
// first).
__kernel void k_logprobs(__global float* vals, ulong vo, __global int* ids, ulong io, __global const float* x, ulong xo,
                         __global const int* toks, ulong to, int r, int v, int k) {
	size_t row = get_global_id(0);
	if (row >= (size_t)r) return;
	__global const float* lg = x + xo + row * (size_t)v;
	__global float* out = vals + vo + row * (size_t)(k + 1);
	__global int* top = ids + io + row * (size_t)k;
	float m = lg[0];
	for (int i = 1; i < v; i++) m = fmax(m, lg[i]);
	float sum = 0.0f;
	for (int i = 0; i < v; i++) sum += exp(lg[i] - m);
	float lse = log(sum);
	int t = toks[to + row];
	out[0] = (t >= 0 && t < v) ? lg[t] - m - lse : -INFINITY;
	int n = 0;
	for (int i = 0; i < v; i++) {
		float xi = lg[i];
		if (n == k && !(xi > lg[top[k - 1]])) continue;
		int j = n < k ? n : k - 1;
		while (j > 0 && xi > lg[top[j - 1]]) {
			top[j] = top[j - 1];
			j--;
		}
		top[j] = i;
		if (n < k) n++;
	}
	for (int j = 0; j < k; j++) out[1 + j] = lg[top[j]] - m - lse;
}

// SplitMix64 of (seed, offset): accel.SampleUniform's generator.
inline ulong splitmix(ulong seed, uint offset) {
	ulong z = seed + 0x9E3779B97F4A7C15UL * ((ulong)offset + 1UL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
	z ^= z >> 31;
	return z;
}

// float32(SampleUniform): the 53-bit integer rounded to float (to nearest
// even), then scaled exactly by 2^-53. Needs no double support.
inline float uniform_float(ulong z) { return convert_float_rte(z >> 11) * 0x1p-53f; }

// ordkey maps a float to a uint in the same order (larger float, larger key).
inline uint ordkey(float x) {
	uint u = as_uint(x);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Probability of logit x at temperature t: exp(x/t - m) / sum, as the CPU
// device's softmax computes it.
inline float prob(float x, float t, float m, float sum) { return exp(x / t - m) / sum; }

// One work-item per row. Temperature <= 0 is the argmax. Otherwise the
// candidates are the top-k (by logit, ties to the lower index) and, within
// them, the smallest leading set whose probability reaches top-p; they are
// found by bisection over the logits' order keys, so no scratch memory and no
// sort is needed. The draw u = SampleUniform(seed, offset) picks against the
// candidates' cumulative probability (in index order), scaled by their total.
__kernel void k_sample(__global int* out, ulong oo, __global const float* logits, ulong lo,
                       __global const float* temp, ulong tpo, __global const int* topk, ulong tko,
                       __global const float* topp, ulong tpp, __global const int* seed, ulong so,
                       __global const int* offs, ulong ofo, int nrows, int v) {
	size_t r = get_global_id(0);
	if (r >= (size_t)nrows) return;
	__global const float* row = logits + lo + r * (size_t)v;
	float t = temp[tpo + r];
	if (!(t > 0.0f)) {
		out[oo + r] = row_argmax(row, v);
		return;
	}
	ulong sd = (ulong)(uint)seed[so + 2 * r] | ((ulong)(uint)seed[so + 2 * r + 1] << 32);
	float u = uniform_float(splitmix(sd, (uint)offs[ofo + r]));

	float m = row[0] / t;
	for (int i = 1; i < v; i++) {
		float x = row[i] / t;
		if (x > m) m = x;
	}
	float sum = 0.0f;
	for (int i = 0; i < v; i++) sum += exp(row[i] / t - m);

	int k = topk[tko + r];
	float pp = topp[tpp + r];
	bool useK = k > 0 && k < v;
	bool useP = pp > 0.0f && pp < 1.0f;
	if (!useK && !useP) {
		float cdf = 0.0f;
		for (int i = 0; i < v; i++) {
			cdf += prob(row[i], t, m, sum);
			if (u < cdf) {
				out[oo + r] = i;
				return;
			}
		}
		out[oo + r] = v - 1;
		return;
	}

	// Top-k: candidates are key > kt, and key == kt up to index klast.
	uint kt = 0;
	int klast = v - 1;
	if (useK) {
		ulong lo2 = 0, hi2 = 0xFFFFFFFFUL;
		while (lo2 < hi2) {
			ulong mid = lo2 + (hi2 - lo2 + 1) / 2;
			int c = 0;
			for (int i = 0; i < v; i++) c += ordkey(row[i]) >= (uint)mid;
			if (c >= k) lo2 = mid;
			else hi2 = mid - 1;
		}
		kt = (uint)lo2;
		int gt = 0;
		for (int i = 0; i < v; i++) gt += ordkey(row[i]) > kt;
		int need = k - gt;
		for (int i = 0; i < v; i++) {
			if (ordkey(row[i]) == kt) {
				need--;
				if (need == 0) {
					klast = i;
					break;
				}
			}
		}
	}
#define IN_K(i, key) ((key) > kt || ((key) == kt && (i) <= klast))

	// Top-p within the top-k: candidates are also key > pt, and key == pt up to
	// index plast.
	uint pt = 0;
	int plast = v - 1;
	if (useP) {
		float all = 0.0f;
		for (int i = 0; i < v; i++) {
			uint key = ordkey(row[i]);
			if (IN_K(i, key)) all += prob(row[i], t, m, sum);
		}
		if (all >= pp) {
			ulong lo2 = 0, hi2 = 0xFFFFFFFFUL;
			while (lo2 < hi2) {
				ulong mid = lo2 + (hi2 - lo2 + 1) / 2;
				float mass = 0.0f;
				for (int i = 0; i < v; i++) {
					uint key = ordkey(row[i]);
					if (IN_K(i, key) && key >= (uint)mid) mass += prob(row[i], t, m, sum);
				}
				if (mass >= pp) lo2 = mid;
				else hi2 = mid - 1;
			}
			pt = (uint)lo2;
			float cum = 0.0f;
			for (int i = 0; i < v; i++) {
				uint key = ordkey(row[i]);
				if (IN_K(i, key) && key > pt) cum += prob(row[i], t, m, sum);
			}
			for (int i = 0; i < v; i++) {
				uint key = ordkey(row[i]);
				if (key == pt && IN_K(i, key)) {
					cum += prob(row[i], t, m, sum);
					if (cum >= pp) {
						plast = i;
						break;
					}
				}
			}
		}
	}
#define IN_SET(i, key) (IN_K(i, key) && ((key) > pt || ((key) == pt && (i) <= plast)))

	float total = 0.0f;
	int last = 0;
	for (int i = 0; i < v; i++) {
		uint key = ordkey(row[i]);
		if (IN_SET(i, key)) {
			total += prob(row[i], t, m, sum);
			last = i;
		}
	}
	float rr = u * total;
	float cdf = 0.0f;
	for (int i = 0; i < v; i++) {
		uint key = ordkey(row[i]);
		if (IN_SET(i, key)) {
			cdf += prob(row[i], t, m, sum);
			if (rr < cdf) {
				out[oo + r] = i;
				return;
			}
		}
	}
	out[oo + r] = last;
#undef IN_SET
#undef IN_K
}

// Copies for graphs (cl_khr_command_buffer's own copy commands changed
// signature across revisions of the extension; a kernel does not).
__kernel void k_copy_u32(__global uint* dst, ulong doff, __global const uint* src, ulong soff, ulong n) {
	size_t i = get_global_id(0);
	if (i >= n) return;
	dst[doff + i] = src[soff + i];
}

__kernel void k_copy_u8(__global uchar* dst, ulong doff, __global const uchar* src, ulong soff, ulong n) {
	size_t i = get_global_id(0);
	if (i >= n) return;
	dst[doff + i] = src[soff + i];
}

// For the tests: the generator's raw 53 bits and its float, per (seed, offset).
__kernel void k_test_uniform(__global uint* out, ulong oo, __global const uint* seeds, ulong so,
                             __global const uint* offs, ulong ofo, int n) {
	size_t i = get_global_id(0);
	if (i >= (size_t)n) return;
	ulong sd = (ulong)seeds[so + 2 * i] | ((ulong)seeds[so + 2 * i + 1] << 32);
	ulong z = splitmix(sd, offs[ofo + i]);
	out[oo + 3 * i] = (uint)(z >> 11);
	out[oo + 3 * i + 1] = (uint)(z >> 43);
	out[oo + 3 * i + 2] = as_uint(uniform_float(z));
}

// k_penalize: accel.OpPenalize, one work-item per row: accel.Penalize on
// every logit of a row with a pool row (a copy otherwise), then min_p
// against the processed row's maximum.
__kernel void k_penalize(__global float* out, ulong oo, __global const float* x, ulong xo, __global const int* counts, ulong co,
                         __global const float* bias, ulong bo, __global const int* rows, ulong ro, __global const float* params, ulong po,
                         __global const float* temp, ulong tpo, int r, int v, int n) {
	size_t row = get_global_id(0);
	if (row >= (size_t)r) return;
	__global const float* lg = x + xo + row * (size_t)v;
	__global float* y = out + oo + row * (size_t)v;
	__global const float* p = params + po + 4 * row;
	int pr = rows[ro + 2 * row];
	if (pr >= 0 && pr < n) {
		__global const int* cr = counts + co + (size_t)pr * v;
		__global const float* br = bias + bo + (size_t)pr * v;
		int mask = rows[ro + 2 * row + 1] & 1;
		float rep = p[0], pres = p[1], freq = p[2];
		for (int j = 0; j < v; j++) {
			float z = lg[j];
			int c = cr[j], cnt = c & 0x1fffffff;
			if (mask && (c & 0x20000000)) z = -INFINITY;
			z += br[j];
			if (cnt > 0 || (c & 0x40000000)) z = z > 0.0f ? z / rep : z * rep;
			z -= freq * (float)cnt;
			if (cnt > 0) z -= pres;
			y[j] = z;
		}
	} else if (y != lg) {
		for (int j = 0; j < v; j++) y[j] = lg[j];
	}
	float minp = p[3], t = temp[tpo + row];
	if (!(minp > 0.0f) || !(t > 0.0f)) return;
	float m = y[0];
	for (int j = 1; j < v; j++) m = fmax(m, y[j]);
	for (int j = 0; j < v; j++)
		if (exp((y[j] - m) / t) < minp) y[j] = -INFINITY;
}

// k_count_tokens: accel.OpCountTokens, one work-item per row (rows with a
// pool row each have their own).
__kernel void k_count_tokens(__global int* counts, ulong co, __global const int* rows, ulong ro, __global const int* toks, ulong to,
                             int r, int v, int n) {
	size_t row = get_global_id(0);
	if (row >= (size_t)r) return;
	int pr = rows[ro + 2 * row], t = toks[to + row];
	if (pr >= 0 && pr < n && t >= 0 && t < v) counts[co + (size_t)pr * v + t] += 1;
}
