// cuda_ops.h: the CUDA implementations behind ops.h (cuda_ops.cu), same signatures, in
// strata::ops::cuda. ops.cc calls them for CUDA tensors; nothing else should.
// Declared only when built with CUDA.
#pragma once

#if STRATA_HAVE_CUDA

#include "trainer/ops/ops.h"

namespace strata::ops::cuda {

void Matmul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
            bool trans_b, float alpha, float beta);
void Fill(const Exec& ex, const Tensor& x, float value);
void Copy(const Exec& ex, const Tensor& src, const Tensor& dst);
void Add(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out);
void Mul(const Exec& ex, const Tensor& a, const Tensor& b, const Tensor& out);
void Scale(const Exec& ex, const Tensor& x, float alpha);
void Axpy(const Exec& ex, float alpha, const Tensor& x, const Tensor& y);
double Sum(const Exec& ex, const Tensor& x);
double SumSquares(const Exec& ex, const Tensor& x);
void AddBias(const Exec& ex, const Tensor& x, const Tensor& bias);
void BiasGrad(const Exec& ex, const Tensor& dy, const Tensor& db);
void Relu(const Exec& ex, const Tensor& x, const Tensor& y);
void ReluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx);
void Gelu(const Exec& ex, const Tensor& x, const Tensor& y);
void GeluBackward(const Exec& ex, const Tensor& x, const Tensor& dy, const Tensor& dx);
void LayerNorm(const Exec& ex, const Tensor& x, const Tensor& gamma, const Tensor& beta,
               float eps, const Tensor& y, const Tensor& mean, const Tensor& rstd);
void LayerNormBackward(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                       const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                       const Tensor& dgamma, const Tensor& dbeta);
void LayerNormBackwardInput(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& dx);
void LayerNormBackwardWeight(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dgamma, const Tensor& dbeta);
void Softmax(const Exec& ex, const Tensor& x, const Tensor& y);
void SoftmaxBackward(const Exec& ex, const Tensor& y, const Tensor& dy, const Tensor& dx);
void CausalAttention(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& att, const Tensor& out);
void CausalAttentionBackward(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& att, const Tensor& dout, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv);
void SplitHeads(const Exec& ex, const Tensor& qkv, int64_t batch, int64_t heads, const Tensor& q,
                const Tensor& k, const Tensor& v);
void MergeHeadsGrad(const Exec& ex, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                    const Tensor& dqkv);
void MergeHeads(const Exec& ex, const Tensor& y, const Tensor& out);
void SplitHeadsGrad(const Exec& ex, const Tensor& dout, const Tensor& dy);
double CrossEntropy(const Exec& ex, const Tensor& logits, const Tensor& targets,
                    const Tensor& dlogits, float grad_scale);
double Mse(const Exec& ex, const Tensor& pred, const Tensor& target, const Tensor& dpred,
           float grad_scale);
double BceWithLogits(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& dlogits, float grad_scale);
void EmbeddingGather(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& rows);
void EmbeddingScatterAdd(const Exec& ex, const Tensor& drows, const Tensor& ids,
                         const Tensor& dtable);
void TransposeLeading(const Exec& ex, const Tensor& in, int64_t a, int64_t b, const Tensor& out);
void EmbeddingGatherRange(const Exec& ex, const Tensor& table, const Tensor& ids, int64_t first,
                          const Tensor& rows);
void EmbeddingScatterAddRange(const Exec& ex, const Tensor& drows, const Tensor& ids,
                              int64_t first, const Tensor& dtable);
void VocabLogitStats(const Exec& ex, const Tensor& logits, const Tensor& targets, int64_t first,
                     const Tensor& row_max, const Tensor& target_logit);
void VocabSumExp(const Exec& ex, const Tensor& logits, const Tensor& row_max,
                 const Tensor& sum_exp);
void VocabCrossEntropyGrad(const Exec& ex, const Tensor& logits, const Tensor& targets,
                           int64_t first, const Tensor& row_max, const Tensor& sum_exp, float g,
                           const Tensor& dlogits);
void Dropout(const Exec& ex, const Tensor& x, float p, uint64_t seed, const Tensor& y);
void DropoutBackward(const Exec& ex, const Tensor& dy, float p, uint64_t seed, const Tensor& dx);
void SgdUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& v, float lr,
               float momentum, float weight_decay, bool nesterov);
void AdamWUpdate(const Exec& ex, const Tensor& w, const Tensor& g, const Tensor& m,
                 const Tensor& v, float lr, float beta1, float beta2, float eps,
                 float weight_decay, int64_t t);
void Cast(const Exec& ex, const Tensor& src, const Tensor& dst);

}  // namespace strata::ops::cuda

#endif  // STRATA_HAVE_CUDA
