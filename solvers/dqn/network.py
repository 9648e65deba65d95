"""The Q-network: a shared encoder per candidate node, optional attention, dueling and C51 heads.

Input of one decision: ``candidates[K, F]`` (one feature row per candidate node), ``context[C]``
(the pod and the cluster) and ``mask[A]`` (which of the ``A = K (+1 defer)`` actions are valid).
Each candidate is encoded with the same weights into an ``embed_dim`` vector, so the network is
permutation-equivariant over candidates and independent of the cluster size: a policy trained on
100 nodes scores the top-K of 20,000. The defer action gets its own embedding from the context.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from solvers.dqn.config import DQNConfig


class NoisyLinear(nn.Module):
    """Linear layer with factorized Gaussian parameter noise (Fortunato et al. 2018).

    In training mode each forward uses the current noise sample (``reset_noise`` draws a new
    one); in eval mode it is a plain linear layer with the mean weights, so evaluation and
    deployment are deterministic.
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("eps_in", torch.zeros(in_features))
        self.register_buffer("eps_out", torch.zeros(out_features))
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight_mu, -bound, bound)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        nn.init.constant_(self.weight_sigma, sigma0 / math.sqrt(in_features))
        nn.init.constant_(self.bias_sigma, sigma0 / math.sqrt(in_features))

    @staticmethod
    def _scaled(size: int, device: torch.device, generator: torch.Generator | None = None) -> torch.Tensor:
        x = torch.randn(size, device=device, generator=generator)
        return x.sign() * x.abs().sqrt()

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """A new noise sample from ``generator`` (on the layer's device; None: torch's global one)."""
        self.eps_in.copy_(self._scaled(self.in_features, self.eps_in.device, generator))
        self.eps_out.copy_(self._scaled(self.out_features, self.eps_out.device, generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        return F.linear(x, weight, bias)


def _linear(cfg: DQNConfig, i: int, o: int) -> nn.Module:
    return NoisyLinear(i, o, cfg.noisy_sigma0) if cfg.noisy else nn.Linear(i, o)


class QNetwork(nn.Module):
    """Q-values (or return distributions) for every candidate slot of a batch of decisions."""

    def __init__(self, cfg: DQNConfig, candidate_features: int, context_features: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.candidate_features, self.context_features = candidate_features, context_features
        out = cfg.atoms if cfg.distributional else 1
        d, h = cfg.embed_dim, cfg.hidden_dim
        self.encoder = nn.Sequential(
            nn.Linear(candidate_features + context_features, h), nn.ReLU(), nn.Linear(h, d), nn.LayerNorm(d),
        )
        self.attention = nn.MultiheadAttention(d, cfg.attention_heads, batch_first=True) if cfg.attention else None
        self.attention_norm = nn.LayerNorm(d) if cfg.attention else None
        self.defer_encoder = (
            nn.Sequential(nn.Linear(context_features, h), nn.ReLU(), nn.Linear(h, d), nn.LayerNorm(d))
            if cfg.defer_action else None
        )
        self.advantage = nn.Sequential(_linear(cfg, d, h), nn.ReLU(), _linear(cfg, h, out))
        self.value = nn.Sequential(_linear(cfg, 2 * d, h), nn.ReLU(), _linear(cfg, h, out)) if cfg.dueling else None
        if cfg.distributional:
            self.register_buffer("support", torch.linspace(cfg.v_min, cfg.v_max, cfg.atoms))
        else:
            self.register_buffer("support", torch.zeros(1))

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.reset_noise(generator)

    def embed(self, candidates: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[B, A, embed_dim]``: one embedding per action slot (candidates, then defer)."""
        b, k, _ = candidates.shape
        ctx = context.unsqueeze(1).expand(b, k, context.shape[-1])
        e = self.encoder(torch.cat([candidates, ctx], dim=-1))
        if self.attention is not None:
            pad = ~mask[:, :k]
            pad = pad & ~pad.all(dim=1, keepdim=True)  # a row with no valid candidate attends to all
            attended, _ = self.attention(e, e, e, key_padding_mask=pad, need_weights=False)
            e = self.attention_norm(e + attended)
        if self.defer_encoder is not None:
            e = torch.cat([e, self.defer_encoder(context).unsqueeze(1)], dim=1)
        return e

    def forward(self, candidates: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``[B, A, atoms]`` (C51) or Q-values ``[B, A]``.

        Invalid actions keep finite outputs here; :meth:`q_values` masks them to -inf.
        """
        mask = mask.bool()
        e = self.embed(candidates, context, mask)
        adv = self.advantage(e)  # [B, A, out]
        if self.value is not None:
            valid = mask.unsqueeze(-1).float()
            count = valid.sum(dim=1).clamp(min=1.0)
            pooled = (e * valid).sum(dim=1) / count
            state = torch.cat([pooled, e.max(dim=1).values], dim=-1)
            mean_adv = (adv * valid).sum(dim=1, keepdim=True) / count.unsqueeze(1)
            logits = self.value(state).unsqueeze(1) + adv - mean_adv
        else:
            logits = adv
        if self.cfg.distributional:
            return F.log_softmax(logits, dim=-1)
        return logits.squeeze(-1)

    def q_values(self, candidates: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Expected returns ``[B, A]`` with invalid actions at -inf."""
        out = self(candidates, context, mask)
        q = (out.exp() * self.support).sum(-1) if self.cfg.distributional else out
        return q.masked_fill(~mask.bool(), float("-inf"))
