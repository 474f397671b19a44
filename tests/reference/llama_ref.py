#!/usr/bin/python3
"""Independent float64 reference forward pass for Hugging Face Llama checkpoints.

Test oracle for the tqserve C++ CPU engine. Pure numpy (no torch); written from
the math, not from tqserve code. Sources of truth:
  * HF transformers LlamaForCausalLM (src/transformers/models/llama/modeling_llama.py)
    and _compute_default/_linear/_llama3_parameters in modeling_rope_utils.py;
    Qwen2ForCausalLM (modeling_qwen2.py: q/k/v projections with biases) and
    Qwen3ForCausalLM (modeling_qwen3.py: RMSNorm q_norm/k_norm over each head's
    head_dim channels, before RoPE); every nn.Linear bias the checkpoint holds
    is added
  * Mixture of experts: MixtralForCausalLM (modeling_mixtral.py:
    MixtralSparseMoeBlock, block_sparse_moe.experts.E.w1/w3/w2, softmax ->
    top-k -> always renormalised), Qwen2MoeForCausalLM (modeling_qwen2_moe.py:
    Qwen2MoeSparseMoeBlock, renormalised only with norm_topk_prob, plus
    sigmoid(shared_expert_gate(x)) * shared_expert(x); a layer is sparse when
    it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0),
    Qwen3MoeForCausalLM (modeling_qwen3_moe.py: as Qwen2-MoE without the
    shared expert); experts as 2-D tensors per expert or transformers v5's
    fused experts.gate_up_proj [E, 2I, H] (gate rows first) / down_proj [E, H, I]
  * RoPE: Su et al., "RoFormer" (arXiv:2104.09864), HF rotate_half layout
  * RMSNorm: Zhang & Sennrich, "Root Mean Square Layer Normalization" (arXiv:1910.07467)
  * safetensors format: 8-byte LE u64 header length, JSON header, raw LE tensor data

Usage:
  llama_ref.py --model DIR --out FILE [--tokens N] [--ids 1,2,3]
  llama_ref.py --model DIR --greedy N [--ids 1,2,3 --greedy-out FILE]
  llama_ref.py --model DIR --ppl FILE --ctx N --stride S [--max-documents K] [--ppl-out F]

Default input: [1] (BOS) + the `# ids [...]` list of
../data/reference_greedy_ids_once_upon_a_time.txt (prompt + greedy continuation),
truncated to the first --tokens (default 64) ids.

Output file format (all little-endian):
  b"TQREF1\\n"                      ASCII magic line (7 bytes)
  int32 num_tokens, int32 vocab
  int32 token_ids[num_tokens]
  float64 logits[num_tokens][vocab]  row-major, logits at every position
"""
import argparse, json, math, os, re, struct, sys, time
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
IDS_FILE = os.path.join(HERE, "..", "data", "reference_greedy_ids_once_upon_a_time.txt")
PROMPT = [1, 403, 407, 261, 378]
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
          "F64": np.dtype("<f8")}


def read_safetensors(path):
    """Parse one .safetensors file with numpy only; returns {name: float64 array}."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=dt).reshape(info["shape"])
        if info["dtype"] == "BF16":  # bf16 = upper 16 bits of an IEEE f32
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.astype(np.float64)
    return out


def load_weights(model_dir):
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):  # sharded checkpoint
        with open(idx) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        w = {}
        for s in shards:
            w.update(read_safetensors(os.path.join(model_dir, s)))
        return w
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


def rope_inv_freq(cfg, hd):
    """inv_freq per HF modeling_rope_utils (default / linear / llama3)."""
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":  # positions / factor  <=>  inv_freq / factor
        return inv / rs["factor"]
    if kind == "llama3":  # _compute_llama3_parameters
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old_ctx = rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old_ctx / lo, old_ctx / hi
        wl = 2 * math.pi / inv
        inv_l = np.where(wl > lo_wl, inv / factor, inv)
        smooth = (old_ctx / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        return np.where(medium, smoothed, inv_l)
    raise SystemExit("unsupported rope_scaling type: %r" % kind)


class Llama:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = c = json.load(f)
        self.w = load_weights(model_dir)
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads") or self.nh
        self.hd = c.get("head_dim") or c["hidden_size"] // self.nh
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.nl = c["num_hidden_layers"]
        self.inv_freq = rope_inv_freq(c, self.hd)
        emb = self.w["model.embed_tokens.weight"]
        tied = c.get("tie_word_embeddings", False) or "lm_head.weight" not in self.w
        self.lm_head = emb if tied else self.w["lm_head.weight"]
        self.vocab = self.lm_head.shape[0]

    def swiglu(self, x, gate, up, down):
        """down(silu(x @ gate.T) * (x @ up.T)) with weight matrices [out, in]."""
        g = x @ gate.T
        return ((g / (1.0 + np.exp(-g))) * (x @ up.T)) @ down.T

    def moe_layer(self, i):
        """The sparse block's name prefix when layer i is sparse, else None."""
        c, arch = self.cfg, self.cfg["architectures"][0]
        if arch == "MixtralForCausalLM":
            return "model.layers.%d.block_sparse_moe." % i
        if arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
            sparse = (i not in (c.get("mlp_only_layers") or []) and c.get("num_experts", 0) > 0
                      and (i + 1) % c.get("decoder_sparse_step", 1) == 0)
            return "model.layers.%d.mlp." % i if sparse else None
        return None

    def expert(self, b, e):
        """Expert e's (gate, up, down) matrices of the block with prefix b."""
        fused = self.w.get(b + "experts.gate_up_proj")
        if fused is not None:
            half = fused.shape[1] // 2
            return fused[e, :half], fused[e, half:], self.w[b + "experts.down_proj"][e]
        names = ("w1", "w3", "w2") if b.endswith("block_sparse_moe.") else \
            ("gate_proj", "up_proj", "down_proj")
        return tuple(self.w[b + "experts.%d.%s.weight" % (e, n)] for n in names)

    def moe(self, h, b):
        """The sparse block on h [T, D]: router softmax over all experts, top-k
        (renormalised for Mixtral, or Qwen's norm_topk_prob), weighted experts,
        plus the gated shared expert when the checkpoint has one."""
        c = self.cfg
        mixtral = b.endswith("block_sparse_moe.")
        k = c["num_experts_per_tok"]
        z = h @ self.w[b + "gate.weight"].T                                 # [T, E]
        p = np.exp(z - z.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-p[t], kind="stable")[:k]
            wt = p[t, top]
            if mixtral or c.get("norm_topk_prob", False):
                wt = wt / wt.sum()
            for e, we in zip(top, wt):
                out[t] += we * self.swiglu(h[t:t + 1], *self.expert(b, e))[0]
        if b + "shared_expert.gate_proj.weight" in self.w:
            s = self.swiglu(h, *(self.w[b + "shared_expert.%s.weight" % n]
                                 for n in ("gate_proj", "up_proj", "down_proj")))
            g = h @ self.w[b + "shared_expert_gate.weight"].T                # [T, 1]
            out = out + s / (1.0 + np.exp(-g))
        return out

    def lin(self, x, name):
        """nn.Linear: y = x @ W.T (+ b if the checkpoint has a bias)."""
        y = x @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y if b is None else y + b

    def rmsnorm(self, x, name):  # LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * w
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * self.w[name]

    def head_norm(self, x, name):
        """Qwen3 q_norm / k_norm on x [T, heads, hd] when the checkpoint has them."""
        return self.rmsnorm(x, name) if name in self.w else x

    @staticmethod
    def rotate_half(x):  # HF: cat(-x2, x1) over the last dim
        h = x.shape[-1] // 2
        return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)

    def forward(self, ids):
        """Logits [T, vocab] for every position of the token sequence `ids`."""
        T, nh, nkv, hd = len(ids), self.nh, self.nkv, self.hd
        x = self.w["model.embed_tokens.weight"][np.asarray(ids)]           # [T, D]
        freqs = np.arange(T, dtype=np.float64)[:, None] * self.inv_freq[None]  # [T, hd/2]
        emb = np.concatenate([freqs, freqs], axis=-1)                       # [T, hd]
        cos, sin = np.cos(emb)[None], np.sin(emb)[None]                     # [1, T, hd]
        mask = np.triu(np.full((T, T), -np.inf), k=1)                       # causal
        group = nh // nkv                                                   # GQA
        for i in range(self.nl):
            p = "model.layers.%d." % i
            h = self.rmsnorm(x, p + "input_layernorm.weight")
            q = self.lin(h, p + "self_attn.q_proj").reshape(T, nh, hd)
            k = self.lin(h, p + "self_attn.k_proj").reshape(T, nkv, hd)
            q = self.head_norm(q, p + "self_attn.q_norm.weight").transpose(1, 0, 2)
            k = self.head_norm(k, p + "self_attn.k_norm.weight").transpose(1, 0, 2)
            v = self.lin(h, p + "self_attn.v_proj").reshape(T, nkv, hd).transpose(1, 0, 2)
            q = q * cos + self.rotate_half(q) * sin                         # RoPE
            k = k * cos + self.rotate_half(k) * sin
            k = np.repeat(k, group, axis=0)  # query head j uses kv head j // group
            v = np.repeat(v, group, axis=0)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask             # [nh, T, T]
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            a = (s / s.sum(axis=-1, keepdims=True)) @ v                     # [nh, T, hd]
            a = a.transpose(1, 0, 2).reshape(T, nh * hd)
            x = x + self.lin(a, p + "self_attn.o_proj")
            h = self.rmsnorm(x, p + "post_attention_layernorm.weight")
            b = self.moe_layer(i)
            if b is not None:
                x = x + self.moe(h, b)
                continue
            g = self.lin(h, p + "mlp.gate_proj")
            g = g / (1.0 + np.exp(-g))                                      # SiLU
            x = x + self.lin(g * self.lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = self.rmsnorm(x, "model.norm.weight")
        return x @ self.lm_head.T


def reference_ids():
    """The `# ids [...]` list (prompt tokens without BOS + greedy continuation)."""
    with open(IDS_FILE) as f:
        for line in f:
            m = re.match(r"#\s*ids\s*\[(.*)\]", line.strip())
            if m:
                return [int(t) for t in m.group(1).split(",") if t.strip()]
    raise SystemExit("no '# ids' line in " + IDS_FILE)


def write_ref(path, ids, logits):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"TQREF1\n")
        f.write(struct.pack("<ii", len(ids), logits.shape[1]))
        f.write(np.asarray(ids, dtype="<i4").tobytes())
        f.write(np.ascontiguousarray(logits, dtype="<f8").tobytes())


def read_documents(path):
    """Documents of a text file: maximal runs of non-blank lines (a blank line
    holds only whitespace), joined with newlines; a trailing CR is dropped."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    docs, cur = [], []
    for line in lines:
        if line.endswith("\r"):
            line = line[:-1]
        if line.strip(" \t\r\f\v") == "":
            if cur:
                docs.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    if cur:
        docs.append("\n".join(cur))
    return docs


def sliding_window_nll(m, ids, ctx, stride):
    """HF "Perplexity of fixed-length models": windows [b, min(b + ctx, n)) for
    b = 0, stride, ...; each scores the targets after the previous window's end
    (never a window's first token). Returns (sum of -ln p, tokens scored)."""
    n, nll, count, prev_end, b = len(ids), 0.0, 0, 0, 0
    if n < 2:
        return 0.0, 0
    while True:
        e = min(b + ctx, n)
        first = max(prev_end, b + 1)
        if first < e:
            z = m.forward(ids[b:e])                                         # [e-b, vocab]
            z = z - z.max(axis=-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))        # log-softmax
            for p in range(first, e):
                nll -= logp[p - 1 - b, ids[p]]
            count += e - first
        prev_end = e
        if e == n:
            return nll, count
        b += stride


def perplexity(m, args):
    import sentencepiece as spm  # Debian python3-sentencepiece
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "tokenizer.model"))
    docs = read_documents(args.ppl)
    if args.max_documents is not None:
        docs = docs[:args.max_documents]
    if not docs:
        raise SystemExit("%s: no text" % args.ppl)
    if args.ctx < 2 or not 1 <= args.stride <= args.ctx:
        raise SystemExit("need --ctx >= 2 and 1 <= --stride <= --ctx")
    nll, count = 0.0, 0
    for d in docs:
        a, c = sliding_window_nll(m, [sp.bos_id()] + sp.encode(d), args.ctx, args.stride)
        nll, count = nll + a, count + c
    ppl = math.exp(nll / count)
    print("perplexity %.6f over %d tokens (%d documents, ctx %d, stride %d)"
          % (ppl, count, len(docs), args.ctx, args.stride))
    if args.ppl_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.ppl_out)), exist_ok=True)
        with open(args.ppl_out, "w") as f:
            f.write("nll_sum %.17g\nnum_predicted %d\nperplexity %.17g\nnum_documents %d\n"
                    "ctx %d\nstride %d\n" % (nll, count, ppl, len(docs), args.ctx, args.stride))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint directory")
    ap.add_argument("--out", help="reference output file (TQREF1 format)")
    ap.add_argument("--tokens", type=int, default=64, help="number of input tokens")
    ap.add_argument("--ids", help="comma-separated token ids (overrides default input)")
    ap.add_argument("--greedy", type=int, help="print N greedy ids from the fixed prompt "
                    "(or from --ids)")
    ap.add_argument("--greedy-out", help="--greedy: also write two lines here, the prompt "
                    "ids and the greedy ids, comma-separated")
    ap.add_argument("--inv-freq-out", help="write the RoPE inverse frequencies here, one a line")
    ap.add_argument("--ppl", help="text file: sliding-window perplexity over its documents "
                    "(split at blank lines, BOS first)")
    ap.add_argument("--ctx", type=int, help="--ppl window length in tokens")
    ap.add_argument("--stride", type=int, help="--ppl window advance in tokens")
    ap.add_argument("--max-documents", type=int, help="--ppl: first K documents only")
    ap.add_argument("--ppl-out", help="--ppl: also write nll_sum/num_predicted/perplexity here")
    args = ap.parse_args()
    if not args.out and not args.greedy and not args.ppl and not args.inv_freq_out:
        ap.error("need --out, --greedy, --ppl and/or --inv-freq-out")
    if args.ppl and (args.ctx is None or args.stride is None):
        ap.error("--ppl needs --ctx and --stride")
    m = Llama(args.model)
    if args.inv_freq_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.inv_freq_out)), exist_ok=True)
        with open(args.inv_freq_out, "w") as f:
            f.write("".join("%.17g\n" % v for v in m.inv_freq))

    if args.ppl:
        perplexity(m, args)

    if args.greedy:
        prompt = [int(t) for t in args.ids.split(",") if t.strip()] if args.ids else PROMPT
        seq = list(prompt)
        for _ in range(args.greedy):  # full recompute each step
            seq.append(int(np.argmax(m.forward(seq)[-1])))
        gen = seq[len(prompt):]
        print("greedy:", gen)
        if args.greedy_out:
            os.makedirs(os.path.dirname(os.path.abspath(args.greedy_out)), exist_ok=True)
            with open(args.greedy_out, "w") as f:
                f.write(",".join(str(t) for t in prompt) + "\n")
                f.write(",".join(str(t) for t in gen) + "\n")
        if not args.ids:
            want = reference_ids()[len(PROMPT) - 1:]  # drop the prompt (file omits BOS)
            n = min(100, len(gen), len(want))
            k = next((i for i in range(n) if gen[i] != want[i]), n)
            print("match: %d/%d" % (k, n))

    if args.out:
        if args.ids:
            ids = [int(t) for t in args.ids.split(",") if t.strip()]
        else:
            ids = ([1] + reference_ids())[:args.tokens]
        t0 = time.time()
        logits = m.forward(ids)
        write_ref(args.out, ids, logits)
        print("wrote %s: %d tokens x %d vocab (%.2fs forward)"
              % (args.out, len(ids), logits.shape[1], time.time() - t0))


if __name__ == "__main__":
    main()
