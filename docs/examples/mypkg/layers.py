"""A tiny decoder: an embedding, a stack of residual MLP blocks, a head that
may tie the embedding's weight."""

from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class TinyLM(nn.Module):
    def __init__(self, depth=2, tied=True):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.layers = nn.ModuleList(Block() for _ in range(depth))
        self.lm_head = nn.Linear(8, 16, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(h)
