"""The pre-softmax projection and the smoothed loss, forward and backward: as the train step runs them now, against
one autograd Function that writes logits and their gradient into one buffer kept across calls (issue 18's proposal).

    .venv/bin/python benchmarks/projection_loss.py [ROWS]

Base shapes (4,096 target tokens, d_model 512, 58,101 pieces), float32, 2 threads, 6 alternated rounds, medians;
prints the loss and gradient differences (0.0 when the two agree bit for bit), the page faults of a round and the
times. ROWS (default 256) is how many rows the fused forward multiplies at once. A measurement for the next step,
not yet the train step's code: the model would return hidden states and the loop would call the fused loss.
"""
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from aiayn.train.loss import label_smoothed_nll
torch.set_num_threads(2)
N, D, V, PAD = 4096, 512, 58101, 58100
R = int(sys.argv[1]) if len(sys.argv) > 1 else 256
SUB = 4 << 20

_buffers = {}
def buffer(n, v, dtype):
    b = _buffers.get(dtype)
    if b is None or b.numel() < n * v:
        b = _buffers[dtype] = torch.empty(n * v, dtype=dtype)
    return b[: n * v].view(n, v)

class Fused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, bias, target, eps, pad):
        n, v = h.size(0), w.size(0)
        keep = target != pad
        G = buffer(n, v, torch.float32)
        lse = torch.empty(n); mean = torch.empty(n)
        sub = max(1, SUB // (4 * v))
        for i in range(0, n, R):
            rows = slice(i, min(i + R, n))
            if bias is None:
                torch.mm(h[rows], w.t(), out=G[rows])
            else:
                torch.addmm(bias, h[rows], w.t(), out=G[rows])
            for j in range(rows.start, rows.stop, sub):
                s = slice(j, min(j + sub, rows.stop))
                z = G[s]
                torch.logsumexp(z, -1, out=lse[s]); torch.mean(z, -1, out=mean[s])
        gold = G.gather(1, target[:, None]).squeeze(1)
        nll = (lse - gold) * keep; uni = (lse - mean) * keep
        for j in range(0, n, sub):
            s = slice(j, min(j + sub, n))
            g = G[s]
            g.sub_(lse[s, None]).exp_().sub_(eps / v)
            g.scatter_add_(1, target[s, None], torch.full_like(lse[s, None], eps - 1.0))
            g.mul_(keep[s, None])
        ctx.save_for_backward(h, w)
        ctx.G = G
        ctx.has_bias = bias is not None
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return (1 - eps) * nll_sum + eps * uni.sum(), nll_sum
    @staticmethod
    def backward(ctx, gl, _):
        h, w = ctx.saved_tensors
        G = ctx.G; s = float(gl)
        gh = torch.mm(G, w); gh.mul_(s)
        gw = torch.mm(G.t(), h); gw.mul_(s)
        return gh, gw, None, None, None, None

def now(h, w, t):
    logits = F.linear(h, w)
    loss, _, n = label_smoothed_nll(logits[None], t[None], 0.1, PAD)
    return loss
def fused(h, w, t):
    return Fused.apply(h, w, None, t, 0.1, PAD)[0]

g = torch.Generator().manual_seed(0)
h = torch.randn(N, D, generator=g, requires_grad=True)
w = (torch.randn(V, D, generator=g) * 0.05).requires_grad_()
t = torch.randint(0, V - 1, (N,), generator=g)
# agreement
outs = {}
for name, f in (("now", now), ("fused", fused)):
    h.grad = w.grad = None
    l = f(h, w, t); l.backward()
    outs[name] = (l.item(), h.grad.clone(), w.grad.clone())
print("loss", outs["now"][0], outs["fused"][0], "gh maxdiff", (outs["now"][1] - outs["fused"][1]).abs().max().item(),
      "gw maxdiff", (outs["now"][2] - outs["fused"][2]).abs().max().item())
times = {"now": [], "fused": []}
for r in range(6):
    for name, f in ((("now", now), ("fused", fused)) if r % 2 else (("fused", fused), ("now", now))):
        h.grad = w.grad = None
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        a = time.perf_counter(); f(h, w, t).backward(); times[name].append(time.perf_counter() - a)
        if r == 5: print(name, "faults", resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print({k: round(statistics.median(v), 3) for k, v in times.items()}, "R", R)
