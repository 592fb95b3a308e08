import os
import torch
import triton
import triton.language as tl

INTERP = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def mma(a, b, acc, UPCAST: tl.constexpr):
    # The CPU interpreter (seen in Triton 3.9) multiplies bf16 tl.dot operands as raw
    # integers: upcast there. On the GPU keep bf16 operands (tensor cores, fp32 accumulate).
    if UPCAST:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        acc = tl.dot(a, b, acc)
    return acc

# ---------------- rmsnorm: one row per program ----------------
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, N, eps,
                   BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)          # int64: row * stride can pass 2**31
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    y = x * rstd * w
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

def rmsnorm(x, w, eps=1e-6, num_warps=None):
    M, N = x.shape
    assert x.stride(1) == 1
    y = torch.empty_like(x)
    BLOCK_N = triton.next_power_of_2(N)
    if num_warps is None:
        num_warps = min(max(BLOCK_N // 512, 4), 16)   # ~8-16 bf16 elements per thread per pass
    rmsnorm_kernel[(M,)](x, w, y, x.stride(0), y.stride(0), N, eps,
                         BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y

# ---------------- rmsnorm: several rows per program (small N) ----------------
@triton.jit
def rmsnorm_rows_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps,
                        ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)          # [ROWS]
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + r64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)

def rmsnorm_rows(x, w, eps=1e-6):
    M, N = x.shape
    y = torch.empty_like(x)
    BLOCK_N = triton.next_power_of_2(N)
    ROWS = max(1, 4096 // BLOCK_N)
    rmsnorm_rows_kernel[(triton.cdiv(M, ROWS),)](x, w, y, M, N, x.stride(0), y.stride(0), eps,
                                                ROWS=ROWS, BLOCK_N=BLOCK_N, num_warps=4)
    return y

# ---------------- softmax: whole row in registers ----------------
@triton.jit
def softmax_kernel(x_ptr, y_ptr, stride_x, stride_y, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)                      # masked lanes: exp(-inf) = 0
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

def softmax(x, num_warps=None):
    M, N = x.shape
    y = torch.empty_like(x)
    BLOCK_N = triton.next_power_of_2(N)
    if num_warps is None:
        num_warps = min(max(BLOCK_N // 512, 4), 32)
    softmax_kernel[(M,)](x, y, x.stride(0), y.stride(0), N, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return y

# ---------------- softmax: looped online (large N) ----------------
@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, stride_x, stride_y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    LOG2E: tl.constexpr = 1.4426950408889634
    m = -float("inf")   # running max
    s = 0.0             # running sum of exp2((x - m) * LOG2E)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2((m - m_new) * LOG2E) + tl.sum(tl.exp2((x - m_new) * LOG2E), axis=0)
        m = m_new
    inv = 1.0 / s
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = tl.exp2((x - m) * LOG2E) * inv
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=cols < N)

def softmax_online(x, BLOCK=4096, num_warps=8):
    M, N = x.shape
    y = torch.empty_like(x)
    softmax_online_kernel[(M,)](x, y, x.stride(0), y.stride(0), N, BLOCK=BLOCK, num_warps=num_warps)
    return y

# ---------------- cross entropy (forward, mean) ----------------
@triton.jit
def ce_row_kernel(logits_ptr, target_ptr, loss_ptr, stride, N, ignore_index,
                  BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride
    LOG2E: tl.constexpr = 1.4426950408889634
    m = -float("inf")
    s = 0.0
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2((m - m_new) * LOG2E) + tl.sum(tl.exp2((x - m_new) * LOG2E), axis=0)
        m = m_new
    lse = m + tl.log2(s) / LOG2E                    # natural-log logsumexp
    t = tl.load(target_ptr + row)
    valid = t != ignore_index
    x_t = tl.load(base + t, mask=valid, other=0.0).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(valid, lse - x_t, 0.0))

@triton.jit
def mean_kernel(loss_ptr, target_ptr, out_ptr, M, ignore_index, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    cnt = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, M, BLOCK):
        i = start + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + i, mask=i < M, other=0.0)
        t = tl.load(target_ptr + i, mask=i < M, other=ignore_index)
        cnt += (t != ignore_index).to(tl.float32)
    tl.store(out_ptr, tl.sum(acc, axis=0) / tl.sum(cnt, axis=0))

def cross_entropy(logits, target, ignore_index=-100, BLOCK=4096, num_warps=8):
    M, N = logits.shape
    loss = torch.empty(M, device=logits.device, dtype=torch.float32)
    ce_row_kernel[(M,)](logits, target, loss, logits.stride(0), N, ignore_index,
                        BLOCK=BLOCK, num_warps=num_warps)
    out = torch.empty((), device=logits.device, dtype=torch.float32)
    mean_kernel[(1,)](loss, target, out, M, ignore_index, BLOCK=1024)
    return out

# ---------------- swiglu (flat, contiguous g and u) ----------------
@triton.jit
def swiglu_kernel(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = g * tl.sigmoid(g) * u
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

def swiglu(g, u, BLOCK=4096, num_warps=8):
    assert g.is_contiguous() and u.is_contiguous() and g.shape == u.shape
    y = torch.empty_like(g)
    n = g.numel()
    swiglu_kernel[(triton.cdiv(n, BLOCK),)](g, u, y, n, BLOCK=BLOCK, num_warps=num_warps)
    return y

# ---------------- rope (rotate-half and interleaved) ----------------
@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, S, H,
                sxb, sxs, sxh, syb, sys, syh, scs,
                D: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr):
    # x: [B, S, H, D] (any strides, last dim contiguous); cos/sin: [S, D // 2]
    pid = tl.program_id(0)            # one program per (b, s) token, all heads
    b = pid // S
    s = pid % S
    h = tl.arange(0, BLOCK_H)[:, None]
    hmask = h < H
    i = tl.arange(0, D // 2)[None, :]
    c = tl.load(cos_ptr + s * scs + i).to(tl.float32)
    sn = tl.load(sin_ptr + s * scs + i).to(tl.float32)
    xb = x_ptr + b.to(tl.int64) * sxb + s.to(tl.int64) * sxs + h * sxh
    yb = y_ptr + b.to(tl.int64) * syb + s.to(tl.int64) * sys + h * syh
    if INTERLEAVED:
        lo, hi = 2 * i, 2 * i + 1          # pairs (x[2i], x[2i+1])
    else:
        lo, hi = i, i + D // 2             # pairs (x[i], x[i + D/2])
    x1 = tl.load(xb + lo, mask=hmask, other=0.0).to(tl.float32)
    x2 = tl.load(xb + hi, mask=hmask, other=0.0).to(tl.float32)
    tl.store(yb + lo, (x1 * c - x2 * sn).to(y_ptr.dtype.element_ty), mask=hmask)
    tl.store(yb + hi, (x2 * c + x1 * sn).to(y_ptr.dtype.element_ty), mask=hmask)

def rope(x, cos, sin, interleaved=False):
    B, S, H, D = x.shape
    assert x.stride(3) == 1 and cos.stride(1) == 1
    y = torch.empty_like(x)
    rope_kernel[(B * S,)](x, cos, sin, y, S, H,
                          x.stride(0), x.stride(1), x.stride(2),
                          y.stride(0), y.stride(1), y.stride(2), cos.stride(0),
                          D=D, INTERLEAVED=interleaved, BLOCK_H=triton.next_power_of_2(H),
                          num_warps=4)
    return y

# ---------------- gemm ----------------
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, UPCAST: tl.constexpr = INTERP):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # grouped ordering: GROUP_M row-tiles share each column tile -> B tiles reused from L2
    width = GROUP_M * num_pid_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_size
    pid_n = (pid % width) // group_size

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = mma(a, b, acc, UPCAST)             # bf16 x bf16 -> fp32 accumulate
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

GEMM_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
]
matmul_tuned = None if INTERP else triton.autotune(configs=GEMM_CONFIGS, key=["M", "N", "K"])(matmul_kernel)

def matmul(a, b, config=None):
    M, K = a.shape
    K2, N = b.shape
    assert K == K2
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if config is not None or matmul_tuned is None:
        cfg = config or dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4)
        kw = {k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")}
        grid = (triton.cdiv(M, kw["BLOCK_M"]) * triton.cdiv(N, kw["BLOCK_N"]),)
        matmul_kernel[grid](*args, **kw, num_warps=cfg.get("num_warps", 4), num_stages=cfg.get("num_stages", 3))
    else:
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        matmul_tuned[grid](*args)
    return c

# ---------------- grouped gemm (MoE) ----------------
# x: [T, K] rows sorted by expert; w: [E, K, N]; offsets: [E + 1] int32 row starts (offsets[E] = T)
@triton.jit
def grouped_mm_kernel(x_ptr, w_ptr, y_ptr, offs_ptr, tile_start_ptr, E, N, K,
                      sxm, sxk, swe, swk, swn, sym, syn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      UPCAST: tl.constexpr = INTERP):
    pid_m = tl.program_id(0)          # global row-tile id over all experts (upper bound grid)
    pid_n = tl.program_id(1)
    # find the expert e whose tile range holds pid_m: tile_start[e] <= pid_m < tile_start[e+1]
    e = 0
    for i in range(1, E):
        e += (tl.load(tile_start_ptr + i) <= pid_m).to(tl.int32)
    total = tl.load(tile_start_ptr + E)
    if pid_m >= total:
        return                         # spare program of the upper-bound grid
    row0 = tl.load(offs_ptr + e)
    row_end = tl.load(offs_ptr + e + 1)
    m_start = row0 + (pid_m - tl.load(tile_start_ptr + e)) * BLOCK_M
    offs_m = m_start + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < row_end          # group end, not T: the next rows belong to another expert
    a_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * sxm + offs_k[None, :] * sxk
    b_ptrs = w_ptr + e.to(tl.int64) * swe + offs_k[:, None] * swk + offs_n[None, :] * swn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=m_mask[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = mma(a, b, acc, UPCAST)
        a_ptrs += BLOCK_K * sxk
        b_ptrs += BLOCK_K * swk
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * sym + offs_n[None, :] * syn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_mask[:, None] & (offs_n[None, :] < N))

def grouped_mm(x, w, offsets, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3):
    T, K = x.shape
    E, _, N = w.shape
    sizes = offsets[1:] - offsets[:-1]                        # on device, no host sync
    tiles = (sizes + BLOCK_M - 1) // BLOCK_M
    tile_start = torch.zeros(E + 1, device=x.device, dtype=torch.int32)
    tile_start[1:] = torch.cumsum(tiles, 0)
    max_tiles = triton.cdiv(T, BLOCK_M) + E                   # bound on sum(cdiv(size_e, BLOCK_M))
    y = torch.empty((T, N), device=x.device, dtype=x.dtype)
    grid = (max_tiles, triton.cdiv(N, BLOCK_N))
    grouped_mm_kernel[grid](x, w, y, offsets, tile_start, E, N, K,
                            x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
                            y.stride(0), y.stride(1),
                            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                            num_warps=num_warps, num_stages=num_stages)
    return y

# ---------------- causal flash attention forward ----------------

@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_base, v_base, sks, svs, S, offs_m, offs_n, offs_d, qk_scale,
                lo, hi, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr,
                UPCAST: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kmask = cols[:, None] < S
        k = tl.load(k_base + cols[:, None] * sks + offs_d[None, :], mask=kmask, other=0.0)
        v = tl.load(v_base + cols[:, None] * svs + offs_d[None, :], mask=kmask, other=0.0)
        qk = mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), UPCAST) * qk_scale
        if CAUSAL_MASK:   # diagonal tile: also hides keys >= S from every valid row
            qk = tl.where(offs_m[:, None] >= cols[None, :], qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], UPCAST)
        m_i = m_new
    return acc, l_i, m_i

@triton.jit
def attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, H, S,
                    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    UPCAST: tl.constexpr = INTERP):
    # heaviest query tiles first: with causal masking the last tiles do the most work
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :],
                mask=offs_m[:, None] < S, other=0.0)
    k_base = k_ptr + b * skb + h * skh
    v_base = v_ptr + b * svb + h * svh
    qk_scale = sm_scale * 1.4426950408889634        # fold log2(e): use exp2 below
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    # 1) key tiles fully below the diagonal: no mask needed
    # 2) the diagonal tile(s): causal mask (also masks keys >= S for valid rows)
    hi_full = start_m * BLOCK_M                       # requires BLOCK_M % BLOCK_N == 0
    hi = tl.minimum((start_m + 1) * BLOCK_M, S)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, sks, svs, S, offs_m, offs_n, offs_d,
                                qk_scale, 0, hi_full, BLOCK_M, BLOCK_N, False, UPCAST)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, sks, svs, S, offs_m, offs_n, offs_d,
                                qk_scale, hi_full, hi, BLOCK_M, BLOCK_N, True, UPCAST)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :],
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < S)

def attention(q, k, v, sm_scale=None, BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3):
    B, H, S, D = q.shape
    sm_scale = D ** -0.5 if sm_scale is None else sm_scale
    o = torch.empty_like(q)
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    attn_fwd_kernel[grid](q, k, v, o, sm_scale, H, S,
                          q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                          v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                          D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages)
    return o

# ---------------- topk (packed keys) ----------------
@triton.jit
def topk_kernel(x_ptr, val_ptr, idx_ptr, N, stride_x, stride_v, stride_i, k,
                BLOCK_N: tl.constexpr, K_POW2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    bits = x.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)          # signed-int order == float order
    # high 32 bits: value key; low 32 bits: reversed index, so equal values prefer the lower index
    packed = (key.to(tl.int64) << 32) | (BLOCK_N - 1 - cols).to(tl.int64)
    top = tl.topk(packed, K_POW2)                       # sorted, largest first
    idx = (BLOCK_N - 1 - (top & 0xFFFFFFFF)).to(tl.int64)
    o = tl.arange(0, K_POW2)
    val = tl.load(x_ptr + row * stride_x + idx, mask=o < k, other=0.0)   # exact values back
    tl.store(val_ptr + row * stride_v + o, val, mask=o < k)
    tl.store(idx_ptr + row * stride_i + o, idx, mask=o < k)

def topk(x, k):
    M, N = x.shape
    vals = torch.empty((M, k), device=x.device, dtype=x.dtype)
    idxs = torch.empty((M, k), device=x.device, dtype=torch.int64)
    BLOCK_N = triton.next_power_of_2(N)
    K_POW2 = triton.next_power_of_2(k)
    topk_kernel[(M,)](x, vals, idxs, N, x.stride(0), vals.stride(0), idxs.stride(0), k,
                      BLOCK_N=BLOCK_N, K_POW2=K_POW2, num_warps=8)
    return vals, idxs
