// The whole forward in one call: embedding rows in, every layer (layer.h), the final norm and the
// output layer, with no Python between the layers. Stack holds the model's tensors, built once
// by engines/lean.py; a forward is the op-by-op forward's operations in its order (the same
// numbers: tests/test_engines.py compares them bit for bit).
#pragma once

#include <torch/extension.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "layer.h"

namespace specsweep {

struct Stack {
  // per layer: norm_in, norm_post, then the four projections' tensors (layer.h's `project`)
  std::vector<std::vector<torch::Tensor>> norms, wqkv, wo, wgu, wd;
  torch::Tensor final_norm;
  std::vector<torch::Tensor> output;  // empty: the caller applies the output layer
  int64_t nh, nkv, hd;
  double eps;
  Family family;

  Stack(std::vector<std::vector<torch::Tensor>> norms, std::vector<std::vector<torch::Tensor>> wqkv,
        std::vector<std::vector<torch::Tensor>> wo, std::vector<std::vector<torch::Tensor>> wgu,
        std::vector<std::vector<torch::Tensor>> wd, torch::Tensor final_norm,
        std::vector<torch::Tensor> output, int64_t nh, int64_t nkv, int64_t hd, double eps,
        Family family)
      : norms(std::move(norms)), wqkv(std::move(wqkv)), wo(std::move(wo)), wgu(std::move(wgu)),
        wd(std::move(wd)), final_norm(std::move(final_norm)), output(std::move(output)), nh(nh),
        nkv(nkv), hd(hd), eps(eps), family(family) {
    const size_t L = this->norms.size();
    TORCH_CHECK(this->wqkv.size() == L && this->wo.size() == L && this->wgu.size() == L &&
                    this->wd.size() == L,
                "Stack: one entry per layer in each list");
  }

  // Several sequences in one forward: x (N, H) their embedded rows, sequence b's at rows
  // [rows[b], rows[b + 1]) (updated in place: the residual stream); ks[b], vs[b]
  // (L, 1, kv, cap_b, hd) its own cache, slots [starts[b], starts[b] + n_b) written; cos, sin
  // (N, hd) each row's rotary; masks[b] (n_b, starts[b] + n_b) bool or empty (causal);
  // keeps[b]: how many of sequence b's last rows get logits (0: all), in sequence order; taps:
  // layer indices 0..L whose input
  // (L: the normed output) is returned for every row, in the order asked. A sequence's numbers
  // are the same bits as in a forward of its own (the products and attention are per row).
  // → (logits, or the normed kept rows where there is no output layer; the taps)
  std::tuple<torch::Tensor, std::vector<torch::Tensor>> forward_seqs(
      torch::Tensor x, std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs,
      std::vector<int64_t> rows, std::vector<int64_t> starts, torch::Tensor cos, torch::Tensor sin,
      std::vector<torch::Tensor> masks, std::vector<int64_t> keeps, std::vector<int64_t> taps) {
    const size_t B = starts.size();
    TORCH_CHECK(ks.size() == B && vs.size() == B && keeps.size() == B && rows.size() == B + 1,
                "forward_seqs: rows (B + 1), caches, starts, masks and keeps (B each)");
    const int64_t L = static_cast<int64_t>(norms.size());
    std::vector<torch::Tensor> tapped(taps.size());
    auto tap = [&](int64_t i, const torch::Tensor& t) {
      for (size_t j = 0; j < taps.size(); ++j)
        if (taps[j] == i) tapped[j] = t.clone();
    };
    std::vector<torch::Tensor> kcs(B), vcs(B);
    for (int64_t i = 0; i < L; ++i) {
      tap(i, x);
      for (size_t b = 0; b < B; ++b) kcs[b] = ks[b][i].select(0, 0), vcs[b] = vs[b][i].select(0, 0);
      attend_mlp_seqs_(x, rms_norm(x, norms[i][0], eps), norms[i][1], wqkv[i], wo[i], wgu[i],
                       wd[i], kcs, vcs, rows, starts, masks, cos, sin, nh, nkv, hd, eps, family);
    }
    auto h = rms_norm(x, final_norm, eps);
    tap(L, h);
    h = kept_rows(h, rows, keeps);
    if (output.empty()) return {h, tapped};
    return {project(h, output, family), tapped};
  }

  // One sequence: x (n, H); k, v (L, 1, kv, cap, hd), slots [start, start + n) written; mask
  // (.., n, start + n) bool or none (causal); keep: the last `keep` rows get logits (0: all).
  std::tuple<torch::Tensor, std::vector<torch::Tensor>> forward(
      torch::Tensor x, torch::Tensor k, torch::Tensor v, int64_t start, torch::Tensor cos,
      torch::Tensor sin, c10::optional<torch::Tensor> mask, int64_t keep,
      std::vector<int64_t> taps) {
    return forward_seqs(x, {k}, {v}, {0, x.size(0)}, {start}, cos, sin,
                        {mask.has_value() ? *mask : torch::Tensor()}, {keep}, taps);
  }

  // Each sequence's last keeps[b] rows (all of them: 0, or more than it has), in sequence order.
  static torch::Tensor kept_rows(const torch::Tensor& h, const std::vector<int64_t>& rows,
                                 const std::vector<int64_t>& keeps) {
    bool all = true;
    for (size_t b = 0; b < keeps.size(); ++b)
      all = all && (keeps[b] <= 0 || keeps[b] >= rows[b + 1] - rows[b]);
    if (all) return h;
    std::vector<torch::Tensor> parts;
    for (size_t b = 0; b < keeps.size(); ++b) {
      const int64_t from = keeps[b] > 0 ? std::max(rows[b], rows[b + 1] - keeps[b]) : rows[b];
      parts.push_back(h.slice(0, from, rows[b + 1]));
    }
    return parts.size() == 1 ? parts[0].contiguous() : torch::cat(parts);
  }
};

}  // namespace specsweep
