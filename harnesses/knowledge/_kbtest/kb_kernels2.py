import os
import torch
import triton
import triton.language as tl
from kb_kernels import INTERP, mma

# ---------- rope, interleaved pairs via contiguous load + reshape/split/join ----------
@triton.jit
def rope_pairs_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, S, H,
                      sxb, sxs, sxh, syb, sys, syh, scs,
                      D: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr):
    pid = tl.program_id(0)
    b = (pid // S).to(tl.int64)
    s = (pid % S).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, D)[None, :]
    mask = h < H
    x = tl.load(x_ptr + b * sxb + s * sxs + h * sxh + d, mask=mask, other=0.0).to(tl.float32)  # [BH, D], contiguous
    i = tl.arange(0, D // 2)[None, :]
    c = tl.load(cos_ptr + s * scs + i).to(tl.float32)        # [1, D/2]
    sn = tl.load(sin_ptr + s * scs + i).to(tl.float32)
    if INTERLEAVED:
        x1, x2 = tl.split(tl.reshape(x, [BLOCK_H, D // 2, 2]))      # even / odd lanes
    else:
        x1, x2 = tl.split(tl.permute(tl.reshape(x, [BLOCK_H, 2, D // 2]), [0, 2, 1]))  # halves
    o1 = x1 * c - x2 * sn
    o2 = x2 * c + x1 * sn
    if INTERLEAVED:
        y = tl.reshape(tl.join(o1, o2), [BLOCK_H, D])
    else:
        y = tl.reshape(tl.permute(tl.join(o1, o2), [0, 2, 1]), [BLOCK_H, D])
    tl.store(y_ptr + b * syb + s * sys + h * syh + d, y.to(y_ptr.dtype.element_ty), mask=mask)

def rope_pairs(x, cos, sin, interleaved=False, num_warps=4):
    B, S, H, D = x.shape
    y = torch.empty_like(x)
    rope_pairs_kernel[(B * S,)](x, cos, sin, y, S, H, x.stride(0), x.stride(1), x.stride(2),
                                y.stride(0), y.stride(1), y.stride(2), cos.stride(0),
                                D=D, INTERLEAVED=interleaved, BLOCK_H=triton.next_power_of_2(H),
                                num_warps=num_warps)
    return y

# ---------- topk in two stages for long rows ----------
@triton.jit
def _pack(x, cols):
    # float32 -> int64 key whose signed order is (value, then lower index first)
    bits = x.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return (key.to(tl.int64) << 32) | (0x7FFFFFFF - cols).to(tl.int64)

@triton.jit
def topk_stage1(x_ptr, cand_ptr, N, stride_x, n_chunks,
                CHUNK: tl.constexpr, KP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    top = tl.topk(_pack(x, cols), KP)
    tl.store(cand_ptr + (row * n_chunks + chunk) * KP + tl.arange(0, KP), top)

@triton.jit
def topk_stage2(x_ptr, cand_ptr, val_ptr, idx_ptr, stride_x, n_cand, k,
                BLOCK_C: tl.constexpr, KP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_C)
    lowest = -9223372036854775807 - 1
    keys = tl.load(cand_ptr + row * n_cand + c, mask=c < n_cand, other=lowest)
    top = tl.topk(keys, KP)
    idx = (0x7FFFFFFF - (top & 0x7FFFFFFF)).to(tl.int64)
    o = tl.arange(0, KP)
    val = tl.load(x_ptr + row * stride_x + idx, mask=o < k, other=0.0)
    tl.store(val_ptr + row * k + o, val, mask=o < k)
    tl.store(idx_ptr + row * k + o, idx, mask=o < k)

def topk_chunked(x, k, CHUNK=4096, num_warps=8):
    M, N = x.shape
    KP = max(2, triton.next_power_of_2(k))     # tl.topk(x, 1) does not compile in Triton 3.6
    CHUNK = max(min(CHUNK, triton.next_power_of_2(N)), KP)
    n_chunks = triton.cdiv(N, CHUNK)
    cand = torch.empty((M, n_chunks * KP), device=x.device, dtype=torch.int64)
    topk_stage1[(M, n_chunks)](x, cand, N, x.stride(0), n_chunks, CHUNK=CHUNK, KP=KP, num_warps=num_warps)
    vals = torch.empty((M, k), device=x.device, dtype=x.dtype)
    idxs = torch.empty((M, k), device=x.device, dtype=torch.int64)
    topk_stage2[(M,)](x, cand, vals, idxs, x.stride(0), n_chunks * KP, k,
                      BLOCK_C=triton.next_power_of_2(n_chunks * KP), KP=KP, num_warps=num_warps)
    return vals, idxs

# ---------- gemm through TMA tensor descriptors, persistent ----------
@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True):
        width = GROUP_M * num_pid_n
        first_m = (tile // width) * GROUP_M
        group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % width) % group_size
        pid_n = (tile % width) // group_size
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])     # out-of-range -> zeros
            b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))  # clipped at edges

@triton.jit
def matmul_tma_np_kernel(a_desc, b_desc, c_desc, M, N, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_size
    pid_n = (pid % width) // group_size
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
        b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))

def matmul_tma(a, b, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, persistent=True):
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    # TMA needs 16-byte aligned base and row strides (bf16: K and N multiples of 8)
    a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K])
    b_desc = TensorDescriptor.from_tensor(b, [BLOCK_K, BLOCK_N])
    c_desc = TensorDescriptor.from_tensor(c, [BLOCK_M, BLOCK_N])
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    if persistent:
        num_sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        matmul_tma_kernel[(min(num_sms, tiles),)](a_desc, b_desc, c_desc, M, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                                  BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, NUM_SMS=num_sms,
                                                  num_warps=num_warps, num_stages=num_stages)
    else:
        matmul_tma_np_kernel[(tiles,)](a_desc, b_desc, c_desc, M, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                       BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_warps=num_warps, num_stages=num_stages)
    return c

# ---------- attention with 4-D TMA descriptors ----------
@triton.jit
def _attn_inner_tma(acc, l_i, m_i, q, k_desc, v_desc, b, h, offs_m, offs_n, qk_scale, lo, hi,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, CAUSAL_MASK: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        k = k_desc.load([b, h, start_n, 0]).reshape(BLOCK_N, D)   # rows past S arrive as zeros
        v = v_desc.load([b, h, start_n, 0]).reshape(BLOCK_N, D)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        if CAUSAL_MASK:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i

@triton.jit
def attn_fwd_tma_kernel(q_desc, k_desc, v_desc, o_desc, sm_scale, H, S,
                        D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([b, h, start_m * BLOCK_M, 0]).reshape(BLOCK_M, D)
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi_full = start_m * BLOCK_M
    hi = tl.minimum((start_m + 1) * BLOCK_M, S)
    acc, l_i, m_i = _attn_inner_tma(acc, l_i, m_i, q, k_desc, v_desc, b, h, offs_m, offs_n, qk_scale,
                                    0, hi_full, BLOCK_M, BLOCK_N, D, False)
    acc, l_i, m_i = _attn_inner_tma(acc, l_i, m_i, q, k_desc, v_desc, b, h, offs_m, offs_n, qk_scale,
                                    hi_full, hi, BLOCK_M, BLOCK_N, D, True)
    acc = acc / l_i[:, None]
    o_desc.store([b, h, start_m * BLOCK_M, 0], acc.to(o_desc.dtype).reshape(1, 1, BLOCK_M, D))  # clipped at S

def attention_tma(q, k, v, sm_scale=None, BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3):
    from triton.tools.tensor_descriptor import TensorDescriptor
    B, H, S, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    o = torch.empty_like(q)
    # works for any strides whose non-last entries are multiples of 16 bytes (last stride 1)
    qd = TensorDescriptor(q, list(q.shape), list(q.stride()), [1, 1, BLOCK_M, D])
    kd = TensorDescriptor(k, list(k.shape), list(k.stride()), [1, 1, BLOCK_N, D])
    vd = TensorDescriptor(v, list(v.shape), list(v.stride()), [1, 1, BLOCK_N, D])
    od = TensorDescriptor(o, list(o.shape), list(o.stride()), [1, 1, BLOCK_M, D])
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    attn_fwd_tma_kernel[grid](qd, kd, vd, od, sm_scale, H, S, D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                              num_warps=num_warps, num_stages=num_stages)
    return o
