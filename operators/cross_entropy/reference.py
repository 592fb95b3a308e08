"""Cross-entropy loss over a large vocabulary, mean over rows (the definition; shown to the agent).

loss = mean_i( logsumexp(logits[i, :]) - logits[i, labels[i]] ), accumulated in float32.
Inputs: logits [M, V] bfloat16 (contiguous), labels [M] int64 with values in [0, V).
Output: a 0-dimensional float32 tensor. No ignore_index, no label smoothing, forward only.
"""
import torch


def reference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    lf = logits.float()
    m = lf.amax(-1)
    lse = m + torch.log(torch.exp(lf - m[:, None]).sum(-1))
    return (lse - lf.gather(1, labels[:, None]).squeeze(1)).mean()


def example_inputs(M: int, V: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(M, V, generator=g).to(torch.bfloat16).to(device)
    labels = torch.randint(0, V, (M,), generator=g).to(device)
    return logits, labels
