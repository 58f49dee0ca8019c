// ops.h: the trainer's tensor ops. Each op checks its shapes (a mismatch is a bug: it aborts),
// then runs the CPU implementation (ops.cc, matmul_ops.cc, norm_ops.cc: OpenBLAS GEMM with its threads; elementwise loops
// and reductions on ParallelFor's sleeping pool, parallel.h, not OpenMP, whose spin-waiting
// regions starved OpenBLAS's threads: steps were 25x slower on a 2-core host; the loops are
// written to vectorise, GELU's tanh and softmax's exp as branch-free polynomials) or the CUDA
// one (cuda_ops.cu: cuBLAS GEMM, our kernels, on ex.stream), chosen by the tensors' device. Compute tensors are contiguous f32 unless a signature says otherwise; index tensors
// are i32 or i64. Outputs are passed in (preallocated); "+=" in a comment means the op
// accumulates into that output, which is how gradients of shared parameters add up.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.h"
#include "trainer/ops/exec.h"

namespace strata::ops {

// --- GEMM (matmul_ops.cc): c = alpha * op(a) @ op(b) + beta * c, op = transpose when the flag
// is set. 2-D ([M,K] @ [K,N]) or batched 3-D ([B,M,K] @ [B,K,N]); shapes are given before
// transposition. ex.matmul tf32 / bf16: the inputs rounded to that precision (exec.h), here and
// in CausalAttention's GEMMs; the CPU's blockwise and cached attention multiply in fp32.
void Matmul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
            bool trans_b, float alpha = 1.0f, float beta = 0.0f);

// --- Elementwise and reductions (same shape unless noted).
void Fill(const Exec& ex, const Tensor& x, float value);
void Copy(const Exec& ex, const Tensor& src, const Tensor& dst);  // same device
void Add(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out);  // out = a + b
void Mul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out);  // out = a * b
void Scale(const Exec& ex, const Tensor& x, float alpha);                      // x *= alpha
void Axpy(const Exec& ex, float alpha, const Tensor& x, const Tensor& y);      // y += alpha x
double Sum(const Exec& ex, const Tensor& x);         // synchronises on CUDA
double SumSquares(const Exec& ex, const Tensor& x);  // synchronises on CUDA
// x [N, D] += bias [D] (broadcast over rows); db [D] += column sums of dy [N, D].
void AddBias(const Exec& ex, const Tensor& x, const Tensor& bias);
void BiasGrad(const Exec& ex, const Tensor& dy, const Tensor& db);

// --- Activations. Backward ops take the forward input x and write dx = dy * f'(x).
void Relu(const Exec& ex, const Tensor& x, const Tensor& y);
void ReluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx);
// The tanh approximation (GPT-2's).
void Gelu(const Exec& ex, const Tensor& x, const Tensor& y);
void GeluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx);

// --- LayerNorm over the last dimension: x [N, D], gamma/beta [D]; saves mean/rstd [N].
void LayerNorm(const Exec& ex, const Tensor& x, const Tensor& gamma, const Tensor& beta,
               float eps, const Tensor& y, const Tensor& mean, const Tensor& rstd);
// dx = ...; dgamma, dbeta +=.
void LayerNormBackward(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                       const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                       const Tensor& dgamma, const Tensor& dbeta);
// The two halves of LayerNormBackward, for a backward split into input and weight gradients
// (nn::Layer::BackwardInput / BackwardWeight): dx = ...; and dgamma, dbeta +=. On the CPU they
// give bit for bit what the fused op gives; on CUDA the weight half sums each column in row
// order (deterministic) where the fused kernel adds rows atomically.
void LayerNormBackwardInput(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& dx);
void LayerNormBackwardWeight(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta);

// --- Softmax over the last dimension of [N, D] (numerically stable).
void Softmax(const Exec& ex, const Tensor& x, const Tensor& y);
// dx = y * (dy - sum(dy * y)).
void SoftmaxBackward(const Exec& ex, const Tensor& y, const Tensor& dy, const Tensor& dx);

// --- Causal scaled-dot-product attention. q, k, v, out: [B, H, T, hd]; att: [B, H, T, T] holds
// the softmax probabilities (saved for backward; entries above the diagonal are 0).
void CausalAttention(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& att, const Tensor& out);
void CausalAttentionBackward(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& att, const Tensor& dout, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv);
// qkv [B*T, 3C] (q | k | v, heads of width C/H side by side) <-> q, k, v [B, H, T, C/H].
void SplitHeads(const Exec& ex, const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& q,
                const Tensor& k, const Tensor& v);
void MergeHeadsGrad(const Exec& ex, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                    const Tensor& dqkv);
// y [B, H, T, hd] -> [B*T, C] and back.
void MergeHeads(const Exec& ex, const Tensor& y, const Tensor& out);
void SplitHeadsGrad(const Exec& ex, const Tensor& dout, const Tensor& dy);

// --- Losses. All return the mean over rows (as double; synchronises on CUDA) and write the
// gradient of that mean with respect to their input, scaled by `grad_scale`.
// logits [N, V], targets i32 [N] (a target < 0 is ignored and excluded from the mean).
double CrossEntropy(const Exec& ex, const Tensor& logits, const Tensor& targets,
                    const Tensor& dlogits, float grad_scale = 1.0f);
// pred, target [N, D]: mean over all elements of (pred - target)^2.
double Mse(const Exec& ex, const Tensor& pred, const Tensor& target, const Tensor& dpred,
           float grad_scale = 1.0f);
// logits [N] (or [N, 1]), labels f32 [N] in {0, 1}: binary cross-entropy with logits.
double BceWithLogits(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& dlogits, float grad_scale = 1.0f);

// --- Embeddings. table [V, D], ids [N] (i32 or i64, each in [0, V)), rows [N, D].
void EmbeddingGather(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& rows);
// dtable [V, D] += drows scattered by ids (repeated ids add up).
void EmbeddingScatterAdd(const Exec& ex, const Tensor& drows, const Tensor& ids,
                         const Tensor& dtable);
// A sparse gradient: the distinct ids in ascending order and the summed row for each, the form
// pushed to a parameter server. CPU tensors only (keys i64 [U], rows f32 [U, D]).
struct SparseRows {
  Tensor keys;
  Tensor rows;
};
SparseRows EmbeddingSparseGrad(const Tensor& drows, const Tensor& ids);

// --- Generation (decode_ops.cc; CPU only): a KV cache [B, H, capacity, hd] per attention layer.
// Writes k and v [B, H, n, hd] into the caches at positions starts[b] .. starts[b] + n - 1 of
// each row b.
void KvAppend(const Exec& ex, const Tensor& k, const Tensor& v, const Tensor& kcache, const Tensor& vcache,
              const std::vector<int64_t>& starts);
// out [B, H, n, hd]: the n new queries of row b (at positions starts[b] + i) attend causally
// over the row's cached keys and values 0 .. starts[b] + i.
void CachedAttention(const Exec& ex, const Tensor& q, const Tensor& kcache, const Tensor& vcache,
                     const std::vector<int64_t>& starts, const Tensor& out);

// --- Blockwise attention (block_attention_ops.cc; CPU only): what ring attention (context
// parallelism) computes one block of keys and values at a time. Queries q [B, H, Tq, hd] sit at
// global positions qpos (Tq of them), keys and values [B, H, Tk, hd] at kpos; a query attends
// to the keys at positions <= its own. The running result is (out [B, H, Tq, hd], lse
// [B, H, Tq]): the attention over the blocks seen so far and the log of its softmax
// denominator (-inf and 0 before any block, and for a query no key reached yet).
// Folds one block into (out, lse) with the online softmax (flash attention's rescaling).
void BlockAttention(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& qpos,
                    const std::vector<int64_t>& kpos, const Tensor& out, const Tensor& lse);
// delta [B, H, Tq] = rowsum(dout * out): the softmax backward's per-query term, once per layer.
void AttentionDelta(const Exec& ex, const Tensor& out, const Tensor& dout, const Tensor& delta);
// One block's part of the backward from the final (out's) lse and delta: dq [B, H, Tq, hd] and
// this block's dk, dv [B, H, Tk, hd] are accumulated into (+=).
void BlockAttentionBackward(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                            const std::vector<int64_t>& qpos, const std::vector<int64_t>& kpos, const Tensor& lse,
                            const Tensor& dout, const Tensor& delta, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv);

// --- Tensor parallelism: a vocabulary split over ranks, each holding rows [first, first + V')
// of the table or columns [first, first + V') of the logits.
// in viewed as [a, b, r] -> out [b, a, r] (contiguous, same numel): how sequence parallelism
// turns a gathered [ranks, N, S, C] into [N, ranks * S, C], and back before a reduce-scatter.
void TransposeLeading(const Exec& ex, const Tensor& in, int64_t a, int64_t b, const Tensor& out);
// rows[i] = table[ids[i] - first] for ids in the slice, zeros for the others.
void EmbeddingGatherRange(const Exec& ex, const Tensor& table, const Tensor& ids, int64_t first,
                          const Tensor& rows);
// dtable[ids[i] - first] += drows[i] for ids in the slice; others are skipped.
void EmbeddingScatterAddRange(const Exec& ex, const Tensor& drows, const Tensor& ids,
                              int64_t first, const Tensor& dtable);
// logits [N, V'] (columns first.. of the full [N, V]), targets i32 [N]: each row's max over the
// slice, and its target's logit when the target is in the slice (0 otherwise, and for targets
// < 0). row_max, target_logit f32 [N].
void VocabLogitStats(const Exec& ex, const Tensor& logits, const Tensor& targets, int64_t first,
                     const Tensor& row_max, const Tensor& target_logit);
// sum_exp[r] = sum over the slice of exp(logits[r, j] - row_max[r]) (row_max: the global max).
void VocabSumExp(const Exec& ex, const Tensor& logits, const Tensor& row_max,
                 const Tensor& sum_exp);
// dlogits = (softmax - onehot(target)) * g over the slice, from the global max and sum of
// exponentials; rows whose target is < 0 get zeros.
void VocabCrossEntropyGrad(const Exec& ex, const Tensor& logits, const Tensor& targets,
                           int64_t first, const Tensor& row_max, const Tensor& sum_exp, float g,
                           const Tensor& dlogits);

// --- Dropout with a counter-based RNG: element i is kept iff hash(seed, i) >= p, so the mask
// is the same on every device and backward regenerates it instead of storing it.
void Dropout(const Exec& ex, const Tensor& x, float p, uint64_t seed, const Tensor& y);
void DropoutBackward(const Exec& ex, const Tensor& dy, float p, uint64_t seed, const Tensor& dx);

// --- Optimizer updates, in place, on the parameter's device.
// v = momentum * v + g; w -= lr * (g + momentum * v if nesterov else v); weight decay added to g.
void SgdUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& v, float lr,
               float momentum, float weight_decay, bool nesterov);
// AdamW with bias correction at step t (1-based); decoupled weight decay.
void AdamWUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& m,
                 const Tensor& v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, int64_t t);

// --- Casts between f32 and f16/bf16 (same shape, contiguous).
void Cast(const Exec& ex, const Tensor& src, const Tensor& dst);

}  // namespace strata::ops
