// reprise's kernels for the CUDA backend: every accel.Op. Semantics are
// accel/kernels.go's. Compiled at run time by NVRTC (no headers, no
// includes) with --fmad=false -default-device; see nvrtc.go.
//
// Rules every kernel keeps:
//   - every pointer is the operand's first element (the segment's base plus
//     the view's offset, checked on the host to be element aligned);
//   - every index into an operand is computed in 64 bits;
//   - a kernel's result for one row (token) never depends on the other rows
//     of the launch: reductions run over one row in a fixed order, so a row
//     computed alone gives the same bits as in a batch, and a replay the same
//     bits as eager execution;
//   - no atomics: results are the same from run to run;
//   - no fused multiply-add (--fmad=false): products are rounded before they
//     are added, as on the CPU device;
//   - block-wide reductions assume blockDim.x is a multiple of 32 and at most
//     1024 (the host launches 128 or 256 threads).
//
// The host side (kernels.go) holds a table of every extern "C" kernel's
// parameter kinds; internal_test.go parses this file and checks the table.

typedef long long i64;
typedef unsigned long long u64;

#define NEG_INF __int_as_float(0xff800000)
#define INT_MAX_ 0x7fffffff
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ i64 lmin(i64 a, i64 b) { return a < b ? a : b; }

__device__ __forceinline__ float bf16_to_float(unsigned short u) {
	return __uint_as_float(((unsigned int)u) << 16);
}

// Grid-stride loop over [0, n).
#define GRID_STRIDE(i, n) \
	for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// ---------------------------------------------------------------------------
// Block reductions. Every thread gets the same result: the per-warp partials
// go through shared memory and every thread combines them in the same order.
// red must hold 32 entries; it is reused across calls (guarded by the leading
// barrier).

__device__ float block_sum(float v, float* red) {
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
	__syncthreads();
	if (lane == 0) red[wid] = v;
	__syncthreads();
	float s = 0.0f;
	for (int i = 0; i < nw; i++) s += red[i];
	return s;
}

__device__ float block_max(float v, float* red) {
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
	__syncthreads();
	if (lane == 0) red[wid] = v;
	__syncthreads();
	float m = red[0];
	for (int i = 1; i < nw; i++) m = fmaxf(m, red[i]);
	return m;
}

__device__ int block_sum_int(int v, int* red) {
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
	__syncthreads();
	if (lane == 0) red[wid] = v;
	__syncthreads();
	int s = 0;
	for (int i = 0; i < nw; i++) s += red[i];
	return s;
}

__device__ int block_min_int(int v, int* red) {
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	for (int o = 16; o > 0; o >>= 1) v = imin(v, __shfl_xor_sync(FULL_MASK, v, o));
	__syncthreads();
	if (lane == 0) red[wid] = v;
	__syncthreads();
	int m = red[0];
	for (int i = 1; i < nw; i++) m = imin(m, red[i]);
	return m;
}

__device__ int block_max_int(int v, int* red) {
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	for (int o = 16; o > 0; o >>= 1) v = imax(v, __shfl_xor_sync(FULL_MASK, v, o));
	__syncthreads();
	if (lane == 0) red[wid] = v;
	__syncthreads();
	int m = red[0];
	for (int i = 1; i < nw; i++) m = imax(m, red[i]);
	return m;
}

// (value, index) pairs: the larger value wins, equal values go to the lower
// index, so the result is the first index of the maximum.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
	return v > bv || (v == bv && i < bi);
}

// block_best combines every thread's (value, index) into the block's best
// (better's order), in a fixed order: every thread gets it, its value in
// *bv; an index no thread found (a row of NaNs) is 0.
__device__ int block_best(float* bvp, int bi, float* redf, int* redi) {
	float bv = *bvp;
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(FULL_MASK, bv, o);
		int oi = __shfl_xor_sync(FULL_MASK, bi, o);
		if (better(ov, oi, bv, bi)) {
			bv = ov;
			bi = oi;
		}
	}
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	__syncthreads();
	if (lane == 0) {
		redf[wid] = bv;
		redi[wid] = bi;
	}
	__syncthreads();
	bv = redf[0];
	bi = redi[0];
	for (int w = 1; w < nw; w++) {
		if (better(redf[w], redi[w], bv, bi)) {
			bv = redf[w];
			bi = redi[w];
		}
	}
	if (bi == INT_MAX_) bi = 0; // a row of NaNs
	*bvp = bv;
	return bi;
}

// block_argmax is the first index of the maximum of row[0..v), as the CPU
// device's argmax: each thread scans i = tid, tid+blockDim, ... keeping its
// first maximum (strictly greater replaces), then pairs combine.
__device__ int block_argmax(const float* row, int v, float* redf, int* redi) {
	float bv = NEG_INF;
	int bi = INT_MAX_;
	if ((int)threadIdx.x < v) {
		bv = row[threadIdx.x];
		bi = threadIdx.x;
	}
	for (int i = threadIdx.x + blockDim.x; i < v; i += blockDim.x) {
		float x = row[i];
		if (x > bv) {
			bv = x;
			bi = i;
		}
	}
	return block_best(&bv, bi, redf, redi);
}

// ---------------------------------------------------------------------------
// OpFill: out[i] = v (the 32-bit pattern of the F32 or I32 value).

extern "C" __global__ void k_fill(unsigned int* out, i64 n, unsigned int v) {
	GRID_STRIDE(i, n) { out[i] = v; }
}

// ---------------------------------------------------------------------------
// OpEmbed and OpGatherRows: out[r] = tab[ids[r]], zero for an id outside
// [0, v).

extern "C" __global__ void k_embed_f32(float* out, const float* tab, const int* ids, int t, int d, int v) {
	GRID_STRIDE(g, (i64)t * d) {
		i64 row = g / d, j = g - row * d;
		int id = ids[row];
		out[g] = (id >= 0 && id < v) ? tab[(i64)id * d + j] : 0.0f;
	}
}

extern "C" __global__ void k_embed_bf16(float* out, const unsigned short* tab, const int* ids, int t, int d, int v) {
	GRID_STRIDE(g, (i64)t * d) {
		i64 row = g / d, j = g - row * d;
		int id = ids[row];
		out[g] = (id >= 0 && id < v) ? bf16_to_float(tab[(i64)id * d + j]) : 0.0f;
	}
}

// ---------------------------------------------------------------------------
// OpRMSNorm: one block per row. out may be x: every element is read (first
// pass) before the barrier in block_sum, and in the second pass each thread
// reads x[j] before it writes out[j].

extern "C" __global__ void __launch_bounds__(256) k_rmsnorm(float* out, const float* x, const float* w, int t, int d, float eps) {
	__shared__ float red[32];
	i64 r = blockIdx.x;
	if (r >= t) return; // uniform across the block
	const float* xr = x + r * d;
	float* orow = out + r * d;
	float ss = 0.0f;
	for (int j = threadIdx.x; j < d; j += blockDim.x) {
		float v = xr[j];
		ss += v * v;
	}
	ss = block_sum(ss, red);
	ss = ss / (float)d;
	ss = ss + eps;
	float inv = 1.0f / sqrtf(ss);
	for (int j = threadIdx.x; j < d; j += blockDim.x) {
		orow[j] = w[j] * (inv * xr[j]);
	}
}

// ---------------------------------------------------------------------------
// OpMatMul: y[T,O] = x[T,I] · W[O,I]ᵀ, W float32 or bf16 (widened exactly),
// float32 accumulation. A block of MM_WARPS warps computes MM_WARPS outputs
// o (one per warp) for every row; rows go in chunks of up to MM_ROWS, whose
// x slices of MM_KS columns are staged in shared memory. Lane l sums
// W[o,k]·x[t,k] for k = l, l+32, ... in order, then the warp's 32 partial
// sums are combined by a fixed butterfly: the order depends on I alone, so a
// row gives the same bits whatever the batch.

#define MM_WARPS 8
#define MM_ROWS 8
#define MM_KS 256

__device__ __forceinline__ float ldw(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ldw(const unsigned short* p) { return bf16_to_float(__ldg(p)); }

template <typename WT, int R>
__device__ __forceinline__ void mm_rows(float* y, const float* x, const WT* w, int I, int O, int t0,
                                        float (*xs)[MM_KS]) {
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int o = blockIdx.x * MM_WARPS + warp;
	bool active = o < O;
	const WT* wr = w + (i64)(active ? o : 0) * I;
	float acc[R];
#pragma unroll
	for (int r = 0; r < R; r++) acc[r] = 0.0f;
	for (int k0 = 0; k0 < I; k0 += MM_KS) {
		int kn = imin(MM_KS, I - k0);
		__syncthreads(); // the previous slice is consumed
		for (int e = threadIdx.x; e < R * MM_KS; e += blockDim.x) {
			int r = e / MM_KS, kk = e - r * MM_KS;
			if (kk < kn) xs[r][kk] = x[(i64)(t0 + r) * I + k0 + kk];
		}
		__syncthreads();
		if (active) {
#pragma unroll 4
			for (int kk = lane; kk < kn; kk += 32) {
				float wv = ldw(wr + k0 + kk);
#pragma unroll
				for (int r = 0; r < R; r++) acc[r] = acc[r] + wv * xs[r][kk];
			}
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
		float v = acc[r];
		for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
		if (lane == 0 && active) y[(i64)(t0 + r) * O + o] = v;
	}
}

template <typename WT>
__device__ __forceinline__ void matmul(float* y, const float* x, const WT* w, int T, int I, int O) {
	__shared__ float xs[MM_ROWS][MM_KS];
	for (int t0 = 0; t0 < T; t0 += MM_ROWS) {
		switch (imin(MM_ROWS, T - t0)) { // uniform across the block
		case 1: mm_rows<WT, 1>(y, x, w, I, O, t0, xs); break;
		case 2: mm_rows<WT, 2>(y, x, w, I, O, t0, xs); break;
		case 3: mm_rows<WT, 3>(y, x, w, I, O, t0, xs); break;
		case 4: mm_rows<WT, 4>(y, x, w, I, O, t0, xs); break;
		case 5: mm_rows<WT, 5>(y, x, w, I, O, t0, xs); break;
		case 6: mm_rows<WT, 6>(y, x, w, I, O, t0, xs); break;
		case 7: mm_rows<WT, 7>(y, x, w, I, O, t0, xs); break;
		default: mm_rows<WT, 8>(y, x, w, I, O, t0, xs); break;
		}
	}
}

extern "C" __global__ void __launch_bounds__(256) k_matmul_f32(float* y, const float* x, const float* w, int t, int nin, int nout) {
	matmul<float>(y, x, w, t, nin, nout);
}

extern "C" __global__ void __launch_bounds__(256) k_matmul_bf16(float* y, const float* x, const unsigned short* w, int t, int nin, int nout) {
	matmul<unsigned short>(y, x, w, t, nin, nout);
}

// ---------------------------------------------------------------------------
// OpMatMul with quantized W (ggml's blocks along each row, addressed in
// bytes): one warp per output; lane l dequantises blocks l, l+32, ... exactly
// as ggml's dequantize_row_* does, summing x·w over each block in order, and
// the warp adds its lanes' sums in a fixed tree. The order depends only on
// the row, never on the batch.

__device__ __forceinline__ float h2f(const unsigned char* p) {
	unsigned int h = (unsigned int)p[0] | ((unsigned int)p[1] << 8);
	unsigned int s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0) return __uint_as_float(s | __float_as_uint((float)m * 5.9604644775390625e-8f));
	if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
	return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ float qdot_q8_0(const unsigned char* blk, const float* x) {
	float d = h2f(blk), s = 0.0f;
	for (int j = 0; j < 32; j++) s = s + x[j] * ((float)(signed char)blk[2 + j] * d);
	return s;
}

__device__ __forceinline__ float qdot_q4_0(const unsigned char* blk, const float* x) {
	float d = h2f(blk), s = 0.0f;
	for (int j = 0; j < 16; j++) s = s + x[j] * ((float)((int)(blk[2 + j] & 15) - 8) * d);
	for (int j = 0; j < 16; j++) s = s + x[16 + j] * ((float)((int)(blk[2 + j] >> 4) - 8) * d);
	return s;
}

__device__ __forceinline__ void scale_min_k4(int j, const unsigned char* q, float* sc, float* m) {
	if (j < 4) {
		*sc = (float)(q[j] & 63);
		*m = (float)(q[j + 4] & 63);
	} else {
		*sc = (float)((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
		*m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

__device__ __forceinline__ float qdot_q4_k(const unsigned char* blk, const float* x) {
	float d = h2f(blk), dmin = h2f(blk + 2), s = 0.0f;
	for (int c = 0; c < 4; c++) {
		const unsigned char* q = blk + 16 + 32 * c;
		float sc, m;
		scale_min_k4(2 * c, blk + 4, &sc, &m);
		float d1 = d * sc, m1 = dmin * m;
		for (int l = 0; l < 32; l++) s = s + x[64 * c + l] * (d1 * (float)(q[l] & 15) - m1);
		scale_min_k4(2 * c + 1, blk + 4, &sc, &m);
		float d2 = d * sc, m2 = dmin * m;
		for (int l = 0; l < 32; l++) s = s + x[64 * c + 32 + l] * (d2 * (float)(q[l] >> 4) - m2);
	}
	return s;
}

__device__ __forceinline__ float qdot_q6_k(const unsigned char* blk, const float* x) {
	float d = h2f(blk + 208), s = 0.0f;
	for (int e = 0; e < 256; e++) {
		int n = e / 128, k = (e % 128) / 32, l = e % 32;
		unsigned char ql = blk[64 * n + 32 * (k & 1) + l], qh = blk[128 + 32 * n + l];
		int q = (int)((k < 2 ? (ql & 15) : (ql >> 4)) | (((qh >> (2 * k)) & 3) << 4)) - 32;
		s = s + x[e] * (d * (float)(signed char)blk[192 + e / 16] * (float)q);
	}
	return s;
}

template <int QK, int BYTES, float (*DOT)(const unsigned char*, const float*)>
__device__ __forceinline__ void qmatmul(float* y, const float* x, const unsigned char* w, int T, int I, int O) {
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int o = blockIdx.x * MM_WARPS + warp;
	if (o >= O) return; // whole warps: the shuffles below stay full
	int nb = I / QK;
	const unsigned char* wr = w + (i64)o * nb * BYTES;
	for (int t = 0; t < T; t++) {
		const float* xr = x + (i64)t * I;
		float acc = 0.0f;
		for (int b = lane; b < nb; b += 32) acc = acc + DOT(wr + (i64)b * BYTES, xr + (i64)b * QK);
		for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(FULL_MASK, acc, off);
		if (lane == 0) y[(i64)t * O + o] = acc;
	}
}

extern "C" __global__ void __launch_bounds__(256) k_matmul_q8_0(float* y, const float* x, const unsigned char* w, int t, int nin, int nout) {
	qmatmul<32, 34, qdot_q8_0>(y, x, w, t, nin, nout);
}

extern "C" __global__ void __launch_bounds__(256) k_matmul_q4_0(float* y, const float* x, const unsigned char* w, int t, int nin, int nout) {
	qmatmul<32, 18, qdot_q4_0>(y, x, w, t, nin, nout);
}

extern "C" __global__ void __launch_bounds__(256) k_matmul_q4_k(float* y, const float* x, const unsigned char* w, int t, int nin, int nout) {
	qmatmul<256, 144, qdot_q4_k>(y, x, w, t, nin, nout);
}

extern "C" __global__ void __launch_bounds__(256) k_matmul_q6_k(float* y, const float* x, const unsigned char* w, int t, int nin, int nout) {
	qmatmul<256, 210, qdot_q6_k>(y, x, w, t, nin, nout);
}

// ---------------------------------------------------------------------------
// OpRoPE: one thread per (token, pair i). The frequencies come by value,
// computed on the host as accel.RoPEFreq does (use_table), or, for heads of
// more than 2*ROPE_TABLE, here in double precision the same way. The angle's
// cosine and sine are taken in double and rounded, as the CPU device does.

#define ROPE_TABLE 128

struct RopeFreqs {
	float f[ROPE_TABLE];
};

extern "C" __global__ void k_rope(float* q, float* k, const int* pos, RopeFreqs fr, int t, int hd, int qc, int kc,
                                  int use_table, float theta) {
	int pairs = hd / 2;
	GRID_STRIDE(g, (i64)t * pairs) {
		i64 r = g / pairs;
		int i = 2 * (int)(g - r * pairs);
		float freq;
		if (use_table) {
			freq = fr.f[i / 2];
		} else {
			freq = 1.0f / (float)pow((double)theta, (double)((float)i / (float)hd));
		}
		float val = (float)pos[r] * freq;
		float fcr = (float)cos((double)val);
		float fci = (float)sin((double)val);
		float* qr = q + r * qc;
		for (int h = 0; h + hd <= qc; h += hd) {
			float v0 = qr[h + i], v1 = qr[h + i + 1];
			qr[h + i] = v0 * fcr - v1 * fci;
			qr[h + i + 1] = v0 * fci + v1 * fcr;
		}
		float* kr = k + r * kc;
		for (int h = 0; h + hd <= kc; h += hd) {
			float v0 = kr[h + i], v1 = kr[h + i + 1];
			kr[h + i] = v0 * fcr - v1 * fci;
			kr[h + i + 1] = v0 * fci + v1 * fcr;
		}
	}
}

// ---------------------------------------------------------------------------
// OpRoPETable: k_rope with the frequencies of the call's operand and the pair
// layout: halves = 0 pairs (2i, 2i+1), halves = 1 pairs (i, i+hd/2). One
// thread per (token, pair); cosine and sine in double, rounded, as k_rope.

extern "C" __global__ void k_rope_table(float* q, float* k, const int* pos, const float* freq, int t, int hd, int qc,
                                        int kc, int halves) {
	int pairs = hd / 2;
	GRID_STRIDE(g, (i64)t * pairs) {
		i64 r = g / pairs;
		int p = (int)(g - r * pairs);
		int i0 = halves ? p : 2 * p;
		int i1 = halves ? p + pairs : 2 * p + 1;
		float val = (float)pos[r] * freq[p];
		float fcr = (float)cos((double)val);
		float fci = (float)sin((double)val);
		float* qr = q + r * qc;
		for (int h = 0; h + hd <= qc; h += hd) {
			float v0 = qr[h + i0], v1 = qr[h + i1];
			qr[h + i0] = v0 * fcr - v1 * fci;
			qr[h + i1] = v0 * fci + v1 * fcr;
		}
		float* kr = k + r * kc;
		for (int h = 0; h + hd <= kc; h += hd) {
			float v0 = kr[h + i0], v1 = kr[h + i1];
			kr[h + i0] = v0 * fcr - v1 * fci;
			kr[h + i1] = v0 * fci + v1 * fcr;
		}
	}
}

// ---------------------------------------------------------------------------
// OpKVWrite: one block per token; a slot outside [0, s) writes nothing.

extern "C" __global__ void __launch_bounds__(256) k_kv_write(float* kc, float* vc, const float* k, const float* v, const int* slots,
                                                             int t, int kd, int vd, int s) {
	i64 r = blockIdx.x;
	if (r >= t) return;
	int slot = slots[r];
	if (slot < 0 || slot >= s) return;
	for (int j = threadIdx.x; j < kd; j += blockDim.x) kc[(i64)slot * kd + j] = k[r * kd + j];
	for (int j = threadIdx.x; j < vd; j += blockDim.x) vc[(i64)slot * vd + j] = v[r * vd + j];
}

// ---------------------------------------------------------------------------
// OpAttention: one block of AT_WARPS warps per (token, head). Warp w takes
// positions w, w+AT_WARPS, ... with an online softmax (running maximum m,
// sum l and weighted values o, lane l holding head elements l, l+32, ...);
// the warps' states are then merged. A token whose row, position or pages
// are out of range gets zeros. Head size at most AT_MAXD (checked on the
// host).

#define AT_WARPS 4
#define AT_MAXD 256
#define AT_PER_LANE (AT_MAXD / 32)

extern "C" __global__ void __launch_bounds__(128) k_attention(float* out, const float* q, const float* kc, const float* vc,
                                                              const int* rows, const int* pos, const int* pages,
                                                              int t, int nh, int nkv, int hd, int page, int nrows, int ppr, int nslots) {
	__shared__ float s_m[AT_WARPS];
	__shared__ float s_l[AT_WARPS];
	__shared__ float s_o[AT_WARPS][AT_MAXD];
	i64 g = blockIdx.x;
	if (g >= (i64)t * nh) return; // uniform across the block
	i64 tok = g / nh;
	int h = (int)(g - tok * nh);
	float* dst = out + tok * nh * hd + (i64)h * hd;
	int r = rows[tok];
	i64 n = (i64)pos[tok] + 1;
	int bad = r < 0 || r >= nrows || n <= 0 || n > (i64)ppr * page;
	const int* pt = pages + (i64)(bad ? 0 : r) * ppr;
	if (!bad) {
		int npg = (int)((n + page - 1) / page);
		int npages = nslots / page;
		for (int p = threadIdx.x; p < npg; p += blockDim.x) {
			int pg = pt[p];
			if (pg < 0 || pg >= npages) bad = 1;
		}
	}
	bad = __syncthreads_or(bad);
	if (bad) {
		for (int i = threadIdx.x; i < hd; i += blockDim.x) dst[i] = 0.0f;
		return;
	}
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const float* qh = q + tok * nh * hd + (i64)h * hd;
	float qv[AT_PER_LANE];
#pragma unroll
	for (int j = 0; j < AT_PER_LANE; j++) {
		int idx = lane + 32 * j;
		qv[j] = idx < hd ? qh[idx] : 0.0f;
	}
	i64 kvd = (i64)nkv * hd;
	i64 koff = (i64)(h / (nh / nkv)) * hd;
	float scale = sqrtf((float)hd);
	float m = NEG_INF, l = 0.0f;
	float o[AT_PER_LANE];
#pragma unroll
	for (int j = 0; j < AT_PER_LANE; j++) o[j] = 0.0f;
	for (int p = warp; p < n; p += AT_WARPS) {
		i64 slot = (i64)pt[p / page] * page + (p % page);
		const float* kp = kc + slot * kvd + koff;
		const float* vp = vc + slot * kvd + koff;
		float s = 0.0f;
#pragma unroll
		for (int j = 0; j < AT_PER_LANE; j++) {
			int idx = lane + 32 * j;
			if (idx < hd) s += qv[j] * kp[idx];
		}
		for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(FULL_MASK, s, off);
		s = s / scale;
		float mn = fmaxf(m, s);
		float corr = expf(m - mn);
		float e = expf(s - mn);
		l = l * corr + e;
#pragma unroll
		for (int j = 0; j < AT_PER_LANE; j++) {
			int idx = lane + 32 * j;
			if (idx < hd) o[j] = o[j] * corr + e * vp[idx];
		}
		m = mn;
	}
	if (lane == 0) {
		s_m[warp] = m;
		s_l[warp] = l;
	}
#pragma unroll
	for (int j = 0; j < AT_PER_LANE; j++) {
		int idx = lane + 32 * j;
		if (idx < hd) s_o[warp][idx] = o[j];
	}
	__syncthreads();
	float mm = s_m[0];
	for (int w = 1; w < AT_WARPS; w++) mm = fmaxf(mm, s_m[w]);
	float sum = 0.0f;
	float f[AT_WARPS];
	for (int w = 0; w < AT_WARPS; w++) {
		// A warp that saw no position has m = -inf and l = 0: weight 0.
		f[w] = s_l[w] > 0.0f ? expf(s_m[w] - mm) : 0.0f;
		sum += s_l[w] * f[w];
	}
	for (int i = threadIdx.x; i < hd; i += blockDim.x) {
		float acc = 0.0f;
		for (int w = 0; w < AT_WARPS; w++) {
			if (f[w] != 0.0f) acc += s_o[w][i] * f[w];
		}
		dst[i] = acc / sum;
	}
}

// ---------------------------------------------------------------------------
// OpSiLUMul and OpAdd, elementwise; out may be a or b (each element is read
// before it is written, by the same thread).

extern "C" __global__ void k_silu_mul(float* out, const float* a, const float* b, i64 n) {
	GRID_STRIDE(i, n) {
		float v = a[i];
		float bv = b[i];
		v = v * (1.0f / (1.0f + expf(-v)));
		out[i] = v * bv;
	}
}

extern "C" __global__ void k_add(float* out, const float* a, const float* b, i64 n) {
	GRID_STRIDE(i, n) {
		float x = a[i];
		float y = b[i];
		out[i] = x + y;
	}
}

// OpAddRow: out[i] = x[i] + b[i % n], n the row length; out may be x.
extern "C" __global__ void k_add_row(float* out, const float* x, const float* b, i64 total, i64 n) {
	GRID_STRIDE(i, total) {
		float v = x[i];
		float y = b[i % n];
		out[i] = v + y;
	}
}

// ---------------------------------------------------------------------------
// OpArgmax: one block per row.

extern "C" __global__ void __launch_bounds__(256) k_argmax(int* out, const float* x, int nrows, int v) {
	__shared__ float redf[32];
	__shared__ int redi[32];
	i64 r = blockIdx.x;
	if (r >= nrows) return;
	int bi = block_argmax(x + r * v, v, redf, redi);
	if (threadIdx.x == 0) out[r] = bi;
}

// ---------------------------------------------------------------------------
// OpSample: one block per row.

// SplitMix64 of (seed, offset): accel.SampleUniform's generator.
__device__ __forceinline__ u64 splitmix(u64 seed, unsigned int offset) {
	u64 z = seed + 0x9E3779B97F4A7C15ULL * ((u64)offset + 1ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	z ^= z >> 31;
	return z;
}

// float32(SampleUniform(seed, offset)): the 53-bit integer is exact in double,
// the division by 2^53 is exact, and the one rounding to float is to nearest,
// as Go's float32(float64) conversion.
__device__ __forceinline__ float uniform_float(u64 z) {
	return __double2float_rn((double)(z >> 11) / 9007199254740992.0);
}

// ordkey maps a float to an unsigned int in the same order.
__device__ __forceinline__ unsigned int ordkey(float x) {
	unsigned int u = __float_as_uint(x);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The row's state while sampling: candidates are chosen by order keys over
// the logits; probabilities are exp(x/t - m) / sum, as the CPU device's
// softmax of x/t computes them.
struct SampleRow {
	const float* row;
	float t, m, sum;
	bool useK;
	unsigned int kt; // top-k: key > kt, or key == kt up to index klast
	int klast;
	bool useP;
	unsigned int pt; // top-p: key > pt, or key == pt up to index plast
	int plast;

	__device__ __forceinline__ float prob(int i) const { return expf(row[i] / t - m) / sum; }
	__device__ __forceinline__ bool inK(int i, unsigned int key) const {
		return !useK || key > kt || (key == kt && i <= klast);
	}
	__device__ __forceinline__ bool inSet(int i, unsigned int key) const {
		return inK(i, key) && (!useP || key > pt || (key == pt && i <= plast));
	}
};

// first_cross finds, in index order, the first i in [0, v) with in(i) whose
// running sum of weight over in(...) elements, starting from base, satisfies
// target < sum (strict) or sum >= target: each thread owns a contiguous chunk
// [c0, c1), the chunks' starting sums are a sequential scan of their totals,
// and each thread walks its own chunk; the smallest index found wins. It
// returns INT_MAX_ when no element qualifies.
template <class F>
__device__ int first_cross(int c0, int c1, F f, float base, float target, bool strict, float* scan, int* redi) {
	float loc = 0.0f;
	for (int i = c0; i < c1; i++) {
		float w;
		if (f(i, &w)) loc += w;
	}
	__syncthreads();
	scan[threadIdx.x] = loc;
	__syncthreads();
	if (threadIdx.x == 0) {
		float s = base;
		for (int j = 0; j < (int)blockDim.x; j++) {
			float l = scan[j];
			scan[j] = s;
			s = s + l;
		}
	}
	__syncthreads();
	float cdf = scan[threadIdx.x];
	int found = INT_MAX_;
	for (int i = c0; i < c1; i++) {
		float w;
		if (!f(i, &w)) continue;
		cdf += w;
		if (strict ? (target < cdf) : (cdf >= target)) {
			found = i;
			break;
		}
	}
	return block_min_int(found, redi);
}

struct InK {
	const SampleRow* s;
	__device__ bool operator()(int i, float* w) const {
		unsigned int key = ordkey(s->row[i]);
		if (!s->inK(i, key)) return false;
		*w = s->prob(i);
		return true;
	}
};

struct AtPT {
	const SampleRow* s;
	__device__ bool operator()(int i, float* w) const {
		unsigned int key = ordkey(s->row[i]);
		if (key != s->pt || !s->inK(i, key)) return false;
		*w = s->prob(i);
		return true;
	}
};

struct InSet {
	const SampleRow* s;
	__device__ bool operator()(int i, float* w) const {
		unsigned int key = ordkey(s->row[i]);
		if (!s->inSet(i, key)) return false;
		*w = s->prob(i);
		return true;
	}
};

struct AtKT {
	const SampleRow* s;
	__device__ bool operator()(int i, float* w) const {
		*w = 1.0f;
		return ordkey(s->row[i]) == s->kt;
	}
};

#define SAMPLE_THREADS 256

// Temperature <= 0 (or NaN) is the argmax. Otherwise the candidates are the
// top-k by logit (ties to the lower index) and, within them, the smallest
// leading set (by logit, ties to the lower index) whose probability reaches
// top-p, both found by bisection over the order keys; the draw u =
// SampleUniform(seed, offset) picks against the candidates' cumulative
// probability in index order, scaled by their total.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) k_sample(int* out, const float* logits, const float* temp, const int* topk,
                                                                      const float* topp, const int* seed, const int* offs, int nrows, int v) {
	__shared__ float redf[32];
	__shared__ int redi[32];
	__shared__ float scan[SAMPLE_THREADS];
	i64 r = blockIdx.x;
	if (r >= nrows) return;
	SampleRow s;
	s.row = logits + r * v;
	s.t = temp[r];
	if (!(s.t > 0.0f)) {
		int bi = block_argmax(s.row, v, redf, redi);
		if (threadIdx.x == 0) out[r] = bi;
		return;
	}
	u64 sd = (u64)(unsigned int)seed[2 * r] | ((u64)(unsigned int)seed[2 * r + 1] << 32);
	float u = uniform_float(splitmix(sd, (unsigned int)offs[r]));
	int chunk = (v + blockDim.x - 1) / blockDim.x;
	int c0 = imin(v, (int)threadIdx.x * chunk), c1 = imin(v, c0 + chunk);

	float m = NEG_INF;
	for (int i = c0; i < c1; i++) m = fmaxf(m, s.row[i] / s.t);
	s.m = block_max(m, redf);
	float sum = 0.0f;
	for (int i = c0; i < c1; i++) sum += expf(s.row[i] / s.t - s.m);
	s.sum = block_sum(sum, redf);

	int k = topk[r];
	float pp = topp[r];
	s.useK = k > 0 && k < v;
	s.useP = pp > 0.0f && pp < 1.0f;
	s.kt = 0;
	s.klast = v - 1;
	s.pt = 0;
	s.plast = v - 1;

	if (s.useK) {
		// The largest kt with at least k keys >= kt.
		u64 lo = 0, hi = 0xFFFFFFFFULL;
		while (lo < hi) { // uniform: the counts are block-wide
			u64 mid = lo + (hi - lo + 1) / 2;
			int c = 0;
			for (int i = c0; i < c1; i++) c += ordkey(s.row[i]) >= (unsigned int)mid;
			c = block_sum_int(c, redi);
			if (c >= k) lo = mid;
			else hi = mid - 1;
		}
		s.kt = (unsigned int)lo;
		int gt = 0;
		for (int i = c0; i < c1; i++) gt += ordkey(s.row[i]) > s.kt;
		gt = block_sum_int(gt, redi);
		// The (k-gt)-th key equal to kt, in index order, is the last one in.
		int need = k - gt;
		AtKT f;
		f.s = &s;
		int last = first_cross(c0, c1, f, 0.0f, (float)need, false, scan, redi);
		s.klast = last == INT_MAX_ ? v - 1 : last;
	}

	if (s.useP) {
		InK fk;
		fk.s = &s;
		float all = 0.0f;
		for (int i = c0; i < c1; i++) {
			float w;
			if (fk(i, &w)) all += w;
		}
		all = block_sum(all, redf);
		if (all >= pp) {
			// The largest pt whose candidates with key >= pt reach pp.
			u64 lo = 0, hi = 0xFFFFFFFFULL;
			while (lo < hi) {
				u64 mid = lo + (hi - lo + 1) / 2;
				float mass = 0.0f;
				for (int i = c0; i < c1; i++) {
					unsigned int key = ordkey(s.row[i]);
					if (s.inK(i, key) && key >= (unsigned int)mid) mass += s.prob(i);
				}
				mass = block_sum(mass, redf);
				if (mass >= pp) lo = mid;
				else hi = mid - 1;
			}
			s.pt = (unsigned int)lo;
			float cum = 0.0f;
			for (int i = c0; i < c1; i++) {
				unsigned int key = ordkey(s.row[i]);
				if (s.inK(i, key) && key > s.pt) cum += s.prob(i);
			}
			cum = block_sum(cum, redf);
			AtPT f;
			f.s = &s;
			int last = first_cross(c0, c1, f, cum, pp, false, scan, redi);
			s.plast = last == INT_MAX_ ? v - 1 : last;
		}
	}

	InSet fs;
	fs.s = &s;
	float total = 0.0f;
	int lastIn = -1;
	for (int i = c0; i < c1; i++) {
		float w;
		if (fs(i, &w)) {
			total += w;
			lastIn = i;
		}
	}
	total = block_sum(total, redf);
	lastIn = block_max_int(lastIn, redi);
	if (lastIn < 0) lastIn = 0;
	float rr = (s.useK || s.useP) ? u * total : u;
	int pick = first_cross(c0, c1, fs, 0.0f, rr, true, scan, redi);
	if (threadIdx.x == 0) {
		if (pick != INT_MAX_) out[r] = pick;
		else out[r] = (s.useK || s.useP) ? lastIn : v - 1;
	}
}

// ---------------------------------------------------------------------------
// For the tests: the generator's raw 53 bits (low and high words) and its
// float, per (seed, offset).

extern "C" __global__ void k_test_uniform(unsigned int* out, const unsigned int* seeds, const unsigned int* offs, int n) {
	GRID_STRIDE(i, (i64)n) {
		u64 sd = (u64)seeds[2 * i] | ((u64)seeds[2 * i + 1] << 32);
		u64 z = splitmix(sd, offs[i]);
		out[3 * i] = (unsigned int)(z >> 11);
		out[3 * i + 1] = (unsigned int)(z >> 43);
		out[3 * i + 2] = __float_as_uint(uniform_float(z));
	}
}

// ---------------------------------------------------------------------------
// OpLogProbs: one block per row. The log-softmax from block_max and
// block_sum; the top k by k block-wide passes, pass j taking the best
// (value, index) ranked after pass j-1's (larger value first, equal values
// by lower index), so no scratch row is needed.

extern "C" __global__ void __launch_bounds__(256) k_logprobs(float* vals, int* ids, const float* x, const int* toks,
                                                             int nrows, int v, int k) {
	__shared__ float redf[32];
	__shared__ int redi[32];
	i64 r = blockIdx.x;
	if (r >= nrows) return;
	const float* row = x + r * v;
	float* out = vals + r * (i64)(k + 1);
	int* top = ids + r * (i64)k;
	float m = NEG_INF;
	for (int i = threadIdx.x; i < v; i += blockDim.x) m = fmaxf(m, row[i]);
	m = block_max(m, redf);
	float sum = 0.0f;
	for (int i = threadIdx.x; i < v; i += blockDim.x) sum += expf(row[i] - m);
	sum = block_sum(sum, redf);
	float lse = logf(sum);
	if (threadIdx.x == 0) {
		int t = toks[r];
		out[0] = (t >= 0 && t < v) ? row[t] - m - lse : NEG_INF;
	}
	float pv = __int_as_float(0x7f800000); // +Inf: nothing taken yet
	int pi = -1;
	for (int j = 0; j < k; j++) {
		float bv = NEG_INF;
		int bi = INT_MAX_;
		for (int i = threadIdx.x; i < v; i += blockDim.x) {
			float xi = row[i];
			bool after = xi < pv || (xi == pv && i > pi);
			if (after && better(xi, i, bv, bi)) {
				bv = xi;
				bi = i;
			}
		}
		bi = block_best(&bv, bi, redf, redi);
		if (threadIdx.x == 0) {
			top[j] = bi;
			out[1 + j] = row[bi] - m - lse;
		}
		pv = bv;
		pi = bi;
	}
}

// ---------------------------------------------------------------------------
// OpPenalize: one block per row, each thread its strided logits:
// accel.Penalize on every logit of a row with a pool row (a copy otherwise),
// then min_p against the processed row's maximum (block_max over what each
// thread wrote itself, so no other barrier is needed).

extern "C" __global__ void __launch_bounds__(256) k_penalize(float* out, const float* x, const int* counts, const float* bias,
                                                             const int* rows, const float* params, const float* temp, int nrows,
                                                             int v, int n) {
	__shared__ float redf[32];
	i64 r = blockIdx.x;
	if (r >= nrows) return;
	const float* lg = x + r * v;
	float* y = out + r * v;
	const float* p = params + 4 * r;
	int pr = rows[2 * r];
	if (pr >= 0 && pr < n) {
		const int* cr = counts + (i64)pr * v;
		const float* br = bias + (i64)pr * v;
		int mask = rows[2 * r + 1] & 1;
		float rep = p[0], pres = p[1], freq = p[2];
		for (int j = threadIdx.x; j < v; j += blockDim.x) {
			float z = lg[j];
			int c = cr[j], cnt = c & 0x1fffffff;
			if (mask && (c & 0x20000000)) z = NEG_INF;
			z += br[j];
			if (cnt > 0 || (c & 0x40000000)) z = z > 0.0f ? z / rep : z * rep;
			z -= freq * (float)cnt;
			if (cnt > 0) z -= pres;
			y[j] = z;
		}
	} else if (y != lg) {
		for (int j = threadIdx.x; j < v; j += blockDim.x) y[j] = lg[j];
	}
	float minp = p[3], t = temp[r];
	if (!(minp > 0.0f) || !(t > 0.0f)) return;
	float m = NEG_INF;
	for (int j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, y[j]);
	m = block_max(m, redf);
	for (int j = threadIdx.x; j < v; j += blockDim.x)
		if (expf((y[j] - m) / t) < minp) y[j] = NEG_INF;
}

// OpCountTokens: one thread per row (rows with a pool row each have their
// own, so no two threads write one count).
extern "C" __global__ void k_count_tokens(int* counts, const int* rows, const int* toks, int nrows, int v, int n) {
	i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= nrows) return;
	int pr = rows[2 * r], t = toks[r];
	if (pr >= 0 && pr < n && t >= 0 && t < v) counts[(i64)pr * v + t] += 1;
}
