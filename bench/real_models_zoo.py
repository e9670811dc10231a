"""Standard architectures of issue [13] defined in torch (torchvision is not installed), at
their usual sizes, with the layer structure of the published models: ResNet-18/50 (basic and
bottleneck blocks), MobileNetV2 (inverted residuals, ReLU6), EfficientNet-B0 (MBConv with
squeeze-excitation, SiLU), a ViT-Ti/16, a Mixer-S/16, a BERT-base and a GPT-2 block, a UNet
(bilinear and nearest upsampling, ConvTranspose), a detection head (TopK, GatherND), an
embedding model (CumSum, OneHot, ScatterND) and an fp16 CNN.

`MODELS[name](quick)` returns `(module, example_inputs)`; `quick=True` gives tiny sizes for
the smoke test. Weights come from `torch.manual_seed(0)` set by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


def _cbr(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
         act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(_cbr(cin, width, 3, stride), _cbr(width, width, 3, act=None))
        self.short = (nn.Identity() if stride == 1 and cin == width
                      else _cbr(cin, width, 1, stride, act=None))

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(_cbr(cin, width, 1), _cbr(width, width, 3, stride),
                                  _cbr(width, out, 1, act=None))
        self.short = (nn.Identity() if stride == 1 and cin == out
                      else _cbr(cin, out, 1, stride, act=None))

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


class ResNet(nn.Module):
    """torchvision's ResNet: 7x7/2 stem, 3x3/2 max-pool, four stages, average pool, fc."""

    def __init__(self, block: Any, depths: list[int], widths: list[int], classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(_cbr(3, widths[0], 7, 2), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, (d, w) in enumerate(zip(depths, widths, strict=True)):
            for j in range(d):
                layers.append(block(cin, w, 2 if j == 0 and i > 0 else 1))
                cin = w * block.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


class _InvRes(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int, k: int = 3,
                 act: type[nn.Module] = nn.ReLU6, se: bool = False):
        super().__init__()
        hid = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [_cbr(cin, hid, 1, act=act)]
        layers.append(_cbr(hid, hid, k, stride, groups=hid, act=act))
        self.se = (nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hid, max(1, cin // 4), 1),
                                 nn.SiLU(), nn.Conv2d(max(1, cin // 4), hid, 1), nn.Sigmoid())
                   if se else None)
        self.pre = nn.Sequential(*layers)
        self.proj = _cbr(hid, cout, 1, act=None)
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.pre(x)
        if self.se is not None:
            y = y * self.se(y)
        y = self.proj(y)
        return x + y if self.res else y


class MobileNetV2(nn.Module):
    CFG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [_cbr(3, 32, 3, 2, act=nn.ReLU6)]
        cin = 32
        for t, c, n, s in self.CFG:
            for i in range(n):
                layers.append(_InvRes(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_cbr(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class EfficientNetB0(nn.Module):
    CFG = ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
           (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3))

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [_cbr(3, 32, 3, 2, act=nn.SiLU)]
        cin = 32
        for t, c, n, s, k in self.CFG:
            for i in range(n):
                layers.append(_InvRes(cin, c, s if i == 0 else 1, t, k, nn.SiLU, se=True))
                cin = c
        layers.append(_cbr(cin, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class _Block(nn.Module):
    """Pre-norm transformer block (ViT, GPT-2) or post-norm (BERT); causal masks for GPT."""

    def __init__(self, dim: int, heads: int, mlp: int, causal: bool = False,
                 post_norm: bool = False):
        super().__init__()
        self.heads, self.causal, self.post = heads, causal, post_norm
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5
        if self.causal:
            s = s + torch.triu(torch.full((t, t), -1e4), 1)
        return self.out((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        if self.post:
            x = self.n1(x + self.attn(x))
            return self.n2(x + self.mlp(x))
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    def __init__(self, size: int, patch: int, dim: int, depth: int, heads: int,
                 classes: int = 1000):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[_Block(dim, heads, 4 * dim) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


class _MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int, tok_hidden: int, ch_hidden: int):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, tok_hidden), nn.GELU(),
                                 nn.Linear(tok_hidden, tokens))
        self.ch = nn.Sequential(nn.Linear(dim, ch_hidden), nn.GELU(), nn.Linear(ch_hidden, dim))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class Mixer(nn.Module):
    def __init__(self, size: int, patch: int, dim: int, depth: int, tok_hidden: int,
                 ch_hidden: int, classes: int = 1000):
        super().__init__()
        tokens = (size // patch) ** 2
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*[_MixerBlock(tokens, dim, tok_hidden, ch_hidden)
                                      for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.blocks(self.embed(x).flatten(2).transpose(1, 2))
        return self.head(self.norm(x).mean(1))


class UNet(nn.Module):
    """Two-level-per-side UNet: the decoder upsamples with ConvTranspose, bilinear and
    nearest Resize in turn."""

    def __init__(self, c: int):
        super().__init__()
        self.e1, self.e2 = _cbr(3, c, 3), _cbr(c, 2 * c, 3)
        self.e3, self.mid = _cbr(2 * c, 4 * c, 3), _cbr(4 * c, 4 * c, 3)
        self.up3 = nn.ConvTranspose2d(4 * c, 4 * c, 2, 2)
        self.d3, self.d2, self.d1 = _cbr(8 * c, 2 * c, 3), _cbr(4 * c, c, 3), _cbr(2 * c, c, 3)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(F.max_pool2d(a, 2))
        c = self.e3(F.max_pool2d(b, 2))
        m = self.mid(F.max_pool2d(c, 2))
        y = self.d3(torch.cat([self.up3(m), c], 1))
        y = self.d2(torch.cat([F.interpolate(y, scale_factor=2.0, mode="bilinear",
                                             align_corners=False), b], 1))
        y = self.d1(torch.cat([F.interpolate(y, scale_factor=2.0, mode="nearest"), a], 1))
        return self.out(y)


class DetHead(nn.Module):
    """Conv backbone, per-anchor scores and boxes, TopK over scores, boxes gathered with
    GatherND (torch's advanced indexing with two index tensors)."""

    def __init__(self, c: int, anchors: int, k: int):
        super().__init__()
        self.body = nn.Sequential(_cbr(3, c, 3, 2), _cbr(c, 2 * c, 3, 2), _cbr(2 * c, 2 * c, 3))
        self.score, self.box = nn.Conv2d(2 * c, anchors, 1), nn.Conv2d(2 * c, 4 * anchors, 1)
        self.k = k

    def forward(self, x):
        f = self.body(x)
        n = x.shape[0]
        scores = self.score(f).reshape(n, -1).sigmoid()
        boxes = self.box(f).reshape(n, 4, -1).transpose(1, 2)
        top, idx = scores.topk(self.k, dim=1)
        rows = torch.arange(n).unsqueeze(1).expand(n, self.k)
        return top, boxes[rows, idx]


class Embedder(nn.Module):
    """Token ids -> positions by CumSum of the non-pad mask, token type one-hot (OneHot),
    embeddings, a transformer block, and a pooled vector written into a slot table with
    ScatterND (index_put)."""

    def __init__(self, vocab: int, dim: int, heads: int, slots: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(512, dim)
        self.typ = nn.Linear(4, dim, bias=False)
        self.block = _Block(dim, heads, 4 * dim, post_norm=True)
        self.slots = slots

    def forward(self, ids, types):
        mask = (ids != 0).long()
        pos = torch.cumsum(mask, 1) * mask
        x = self.tok(ids) + self.pos(pos) + self.typ(F.one_hot(types, 4).float())
        x = self.block(x)
        pooled = (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        table = torch.zeros(self.slots, x.shape[-1])
        where = ids[:, 0] % self.slots
        return table.index_put((where,), pooled)


def _ids(batch: int, seq: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    ids[:, seq - seq // 4:] = 0
    return ids, torch.randint(0, 4, (batch, seq), generator=g)


def _img(size: int, batch: int = 1, dtype: torch.dtype = torch.float32):
    return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))
            .to(dtype),)


ModelFn = Callable[[bool], tuple[nn.Module, tuple[torch.Tensor, ...]]]
MODELS: dict[str, ModelFn] = {
    "resnet18": lambda q: (ResNet(_Basic, [2, 2, 2, 2], [64, 128, 256, 512] if not q
                                  else [8, 8, 16, 16], 1000 if not q else 10),
                           _img(224 if not q else 32)),
    "resnet50": lambda q: (ResNet(_Bottleneck, [3, 4, 6, 3] if not q else [1, 1, 1, 1],
                                  [64, 128, 256, 512] if not q else [8, 8, 8, 8]),
                           _img(224 if not q else 32)),
    "mobilenet_v2": lambda q: (MobileNetV2(), _img(224 if not q else 32)),
    "efficientnet_b0": lambda q: (EfficientNetB0(), _img(224 if not q else 32)),
    "vit_ti16": lambda q: (ViT(224, 16, 192, 12, 3) if not q else ViT(32, 16, 16, 1, 2, 10),
                           _img(224 if not q else 32)),
    "mixer_s16": lambda q: (Mixer(224, 16, 512, 8, 256, 2048) if not q
                            else Mixer(32, 16, 16, 1, 8, 32, 10), _img(224 if not q else 32)),
    "bert_block": lambda q: (_Block(768, 12, 3072, post_norm=True) if not q
                             else _Block(16, 2, 32, post_norm=True),
                             (torch.randn(1, 128 if not q else 8, 768 if not q else 16),)),
    "gpt2_block": lambda q: (_Block(768, 12, 3072, causal=True) if not q
                             else _Block(16, 2, 32, causal=True),
                             (torch.randn(1, 128 if not q else 8, 768 if not q else 16),)),
    "unet": lambda q: (UNet(32 if not q else 4), _img(256 if not q else 16)),
    "det_head": lambda q: (DetHead(32 if not q else 4, 9 if not q else 2, 100 if not q else 5),
                           _img(320 if not q else 32)),
    "embedder": lambda q: (Embedder(30522 if not q else 50, 256 if not q else 16,
                                    4 if not q else 2, 64 if not q else 4),
                           _ids(4 if not q else 2, 128 if not q else 8, 30522 if not q else 50)),
    "fp16_cnn": lambda q: (ResNet(_Basic, [2, 2, 2, 2] if not q else [1, 1, 1, 1],
                                  [32, 64, 128, 256] if not q else [8, 8, 8, 8]).half(),
                           _img(128 if not q else 32, dtype=torch.float16)),
}
