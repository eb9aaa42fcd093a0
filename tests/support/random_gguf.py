"""Writes a tiny GGUF model with random F32 weights, for tests that compare
ggplan's results with llama.cpp's on architectures no small real model covers.

Usage: random_gguf.py ARCH OUT.gguf --tokenizer-from TOKENIZER.gguf
                      [--seed N] [--plain-rope]
                      [--moe-shape EMBD,LAYERS,EXPERTS,USED,FF_EXP]

ARCH is one of:
  llama3  architecture `llama`, Llama-3 style: a `rope_freqs.weight` tensor
          (per-pair rope frequency factors, which llama.cpp divides each
          pair's angle by), rope freq_base 500000.
  qwen3   architecture `qwen3`: per-layer `attn_q_norm`/`attn_k_norm`
          (RMS norm over each head), no q/k/v biases, rope freq_base 1e6
          (llama.cpp picks NEOX rope for this architecture).
  gemma3  architecture `gemma3`, n_layer 6: llama.cpp makes layers 0-4
          sliding-window (`gemma3.attention.sliding_window` 4 tokens, so a
          16-token prompt exercises the window; rope freq_base_swa 10000) and
          layer 5 global (rope freq_base 1e6), from
          `gemma3.attention.sliding_window_pattern` 6 (written explicitly;
          also llama.cpp's default). Per layer `attn_q_norm`/`attn_k_norm`,
          `post_attention_norm` and `post_ffw_norm` (RMS norms after the
          attention and the FFN, before the residual adds); GELU-gated FFN;
          NEOX rope; the token embedding scaled by sqrt(n_embd) at run time
          (so it is drawn with std 1/sqrt(n_embd)); Q scaled by 1/sqrt(head_dim)
          before attention; no final logit softcapping. Norm weights are
          stored as the factor llama.cpp multiplies by (its converter adds
          Gemma's +1 when writing a GGUF), like every other arch here.
  qwen3moe architecture `qwen3moe`: qwen3's attention (q/k norms, NEOX
          rope, freq_base 1e6) with a mixture-of-experts FFN in place of the
          dense one: `qwen3moe.expert_count` 8 experts,
          `qwen3moe.expert_used_count` 2 per token,
          `qwen3moe.expert_feed_forward_length` 32. Per layer a router
          `ffn_gate_inp` (ggml ne [n_embd, n_expert]) and the stacked experts
          `ffn_gate_exps`/`ffn_up_exps` (ne [n_embd, n_ff_exp, n_expert]) and
          `ffn_down_exps` (ne [n_ff_exp, n_embd, n_expert]). llama.cpp
          takes the softmax of the router logits, picks the top 2 experts,
          renormalizes their two probabilities to sum 1, and sums the SwiGLU
          experts' outputs weighted by them. The router is drawn with gain
          MOE_ROUTER_GAIN so its logits spread by a few units: different
          tokens pick different experts, and the 2nd and 3rd best are rarely
          close enough for rounding to swap them.
  mixtral architecture `llama` with experts, as llama.cpp reads Mixtral:
          llama's attention (no head norms, normal rope, freq_base 1e6) and
          qwen3moe's experts (8, 2 per token, the same tensors and routing),
          each `llama.feed_forward_length` = 32 wide (llama.cpp sizes a
          llama's experts by that key; no `expert_feed_forward_length`).
  olmoe   architecture `olmoe`: NEOX rope (freq_base 10000), the whole query
          and key projections RMS-normed per token before they are split into
          heads (`attn_q_norm` and `attn_k_norm` of n_embd: OLMoE has no
          GQA, n_head_kv 4, as llama.cpp expects), and mixtral's experts (8, 2 per token,
          `feed_forward_length` 32 wide) with the chosen experts' soft_max
          probabilities used as they are (llama.cpp does not renormalise
          them for OLMoE).
All: n_embd 64, n_head 4, n_head_kv 2 (GQA), head_dim 16, n_layer 2 (gemma3:
6), n_ff 128 (qwen3moe: written but unused; mixtral, olmoe: 32, the experts'), context length 256, rms eps
1e-6, a separate (untied) `output.weight`, and every tensor F32 so that
results can be compared closely.

The weights are drawn from numpy's default_rng(--seed), scaled so that
activations stay near unit size and the logits have a spread of a few units.
The vocabulary and every `tokenizer.*` key are copied from --tokenizer-from
(tests use the SmolLM2 GGUF, GGPLAN_SMOLLM2_GGUF in .models/paths.env), so
llama.cpp can tokenize a text prompt. --plain-rope (llama3 only) writes all
rope frequency factors as 1.0 and leaves every other weight unchanged, to
check that the factors matter. --moe-shape (qwen3moe only) writes a larger
model for benchmarks: n_embd EMBD (4 heads of EMBD/4, 2 KV heads), LAYERS
blocks, EXPERTS experts of FF_EXP, USED per token.

Needs `gguf` and `numpy` (scripts/setup.sh installs them into .models/venv).
"""

import argparse

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType

N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM = 64, 4, 2, 16
N_FF, N_CTX, RMS_EPS = 128, 256, 1e-6
# qwen3moe and mixtral: experts per layer, experts used per token, each expert's FFN
# width, and the router's gain (its logits' std for a unit-size input).
N_EXPERT, N_EXPERT_USED, N_FF_EXP, MOE_ROUTER_GAIN = 8, 2, 32, 2.0
ARCHS = {  # ARCH -> (gguf architecture, rope freq_base, n_layer)
    "llama3": ("llama", 500000.0, 2),
    "qwen3": ("qwen3", 1000000.0, 2),
    "gemma3": ("gemma3", 1000000.0, 6),
    "qwen3moe": ("qwen3moe", 1000000.0, 2),
    "mixtral": ("llama", 1000000.0, 2),
    "olmoe": ("olmoe", 10000.0, 2),
}
MOE_ARCHS = ("qwen3moe", "mixtral", "olmoe")
# Experts as wide as feed_forward_length (llama.cpp reads no width of theirs).
FF_WIDE_EXPERTS = ("mixtral", "olmoe")
# gemma3 only: every GEMMA3_SWA_PATTERN-th layer (the last of each group) is
# global, the others attend to the last GEMMA3_SWA_WINDOW positions (the
# token's own included) and use rope base GEMMA3_FREQ_BASE_SWA.
GEMMA3_SWA_WINDOW, GEMMA3_SWA_PATTERN, GEMMA3_FREQ_BASE_SWA = 4, 6, 10000.0


def copy_tokenizer(writer: GGUFWriter, path: str) -> int:
    """Copies every tokenizer.* key from the GGUF at `path`; returns n_vocab."""
    reader = GGUFReader(path)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(key, value, vtype, sub_type)
    return len(reader.fields["tokenizer.ggml.tokens"].data)


def rope_factors(rng: np.random.Generator) -> np.ndarray:
    """Frequency factors for the HEAD_DIM/2 rope pairs: pair 0 (the fastest)
    unscaled, as in Llama 3; the rest random in [1, 8]. The Llama-3.1 formula
    itself would only scale pairs whose angles stay tiny over a short prompt,
    so its effect would barely show in a test."""
    factors = rng.uniform(1.0, 8.0, HEAD_DIM // 2)
    factors[0] = 1.0
    return factors.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arch", choices=sorted(ARCHS))
    parser.add_argument("out")
    parser.add_argument("--tokenizer-from", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plain-rope", action="store_true")
    parser.add_argument("--moe-shape", metavar="EMBD,LAYERS,EXPERTS,USED,FF_EXP")
    args = parser.parse_args()
    if args.plain_rope and args.arch != "llama3":
        parser.error("--plain-rope applies to llama3 only")

    arch, freq_base, n_layer = ARCHS[args.arch]
    if args.moe_shape:
        if args.arch != "qwen3moe":
            parser.error("--moe-shape applies to qwen3moe only")
        try:
            embd, n_layer, experts, used, ff_exp = (
                int(v) for v in args.moe_shape.split(","))
        except ValueError:
            parser.error(f"--moe-shape {args.moe_shape}: expected five integers")
        if embd % N_HEAD or min(embd, n_layer, experts, used, ff_exp) < 1 or used > experts:
            parser.error(f"--moe-shape {args.moe_shape}: EMBD must be a multiple of "
                         f"{N_HEAD} and USED at most EXPERTS, all positive")
        global N_EMBD, HEAD_DIM, N_EXPERT, N_EXPERT_USED, N_FF_EXP
        N_EMBD, HEAD_DIM = embd, embd // N_HEAD
        N_EXPERT, N_EXPERT_USED, N_FF_EXP = experts, used, ff_exp
    rng = np.random.default_rng(args.seed)
    writer = GGUFWriter(args.out, arch)

    writer.add_name(f"ggplan random {args.arch} (seed {args.seed})")
    writer.add_file_type(LlamaFileType.ALL_F32)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(N_FF_EXP if args.arch in FF_WIDE_EXPERTS else N_FF)
    writer.add_head_count(N_HEAD)
    # OLMoE has no GQA: llama.cpp sizes its key norm n_embd wide.
    n_head_kv = N_HEAD if args.arch == "olmoe" else N_HEAD_KV
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_freq_base(freq_base)
    writer.add_rope_dimension_count(HEAD_DIM)
    if args.arch == "gemma3":
        writer.add_sliding_window(GEMMA3_SWA_WINDOW)
        # No gguf-py helpers for these two keys in the pinned version.
        writer.add_uint32(f"{arch}.attention.sliding_window_pattern",
                          GEMMA3_SWA_PATTERN)
        writer.add_float32(f"{arch}.rope.freq_base_swa", GEMMA3_FREQ_BASE_SWA)
    if args.arch in MOE_ARCHS:
        writer.add_expert_count(N_EXPERT)
        writer.add_expert_used_count(N_EXPERT_USED)
    if args.arch == "qwen3moe":
        writer.add_expert_feed_forward_length(N_FF_EXP)
    n_vocab = copy_tokenizer(writer, args.tokenizer_from)

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (std * rng.standard_normal(shape)).astype(np.float32)

    # A projection from n_in to n_out: numpy shape (n_out, n_in) is ggml ne
    # [n_in, n_out]. Std 1/sqrt(n_in) keeps unit-size inputs unit-size.
    def matrix(n_out: int, n_in: int, gain: float = 1.0) -> np.ndarray:
        return normal((n_out, n_in), gain / np.sqrt(n_in))

    def norm(n: int) -> np.ndarray:
        return 1.0 + normal((n,), 0.1)

    q_dim, kv_dim = N_HEAD * HEAD_DIM, n_head_kv * HEAD_DIM
    # gemma3 multiplies the embedding by sqrt(n_embd), so it starts unit-size.
    embd_std = 1.0 / np.sqrt(N_EMBD) if args.arch == "gemma3" else 1.0
    tensors = {"token_embd.weight": normal((n_vocab, N_EMBD), embd_std)}
    if args.arch == "llama3":
        factors = rope_factors(rng)  # drawn even when plain, keeping the rest
        if args.plain_rope:
            factors = np.ones_like(factors)
        tensors["rope_freqs.weight"] = factors
    for i in range(n_layer):
        blk = f"blk.{i}."
        tensors[blk + "attn_norm.weight"] = norm(N_EMBD)
        tensors[blk + "attn_q.weight"] = matrix(q_dim, N_EMBD)
        tensors[blk + "attn_k.weight"] = matrix(kv_dim, N_EMBD)
        tensors[blk + "attn_v.weight"] = matrix(kv_dim, N_EMBD)
        if args.arch in ("qwen3", "gemma3", "qwen3moe"):
            tensors[blk + "attn_q_norm.weight"] = norm(HEAD_DIM)
            tensors[blk + "attn_k_norm.weight"] = norm(HEAD_DIM)
        if args.arch == "olmoe":
            tensors[blk + "attn_q_norm.weight"] = norm(q_dim)
            tensors[blk + "attn_k_norm.weight"] = norm(kv_dim)
        tensors[blk + "attn_output.weight"] = matrix(N_EMBD, q_dim)
        if args.arch == "gemma3":
            tensors[blk + "post_attention_norm.weight"] = norm(N_EMBD)
        tensors[blk + "ffn_norm.weight"] = norm(N_EMBD)
        if args.arch in MOE_ARCHS:
            # numpy (n_expert, n_out, n_in) is ggml ne [n_in, n_out, n_expert]:
            # one (n_out, n_in) projection per expert.
            tensors[blk + "ffn_gate_inp.weight"] = matrix(
                N_EXPERT, N_EMBD, MOE_ROUTER_GAIN)
            tensors[blk + "ffn_gate_exps.weight"] = normal(
                (N_EXPERT, N_FF_EXP, N_EMBD), 1.0 / np.sqrt(N_EMBD))
            tensors[blk + "ffn_up_exps.weight"] = normal(
                (N_EXPERT, N_FF_EXP, N_EMBD), 1.0 / np.sqrt(N_EMBD))
            tensors[blk + "ffn_down_exps.weight"] = normal(
                (N_EXPERT, N_EMBD, N_FF_EXP), 1.0 / np.sqrt(N_FF_EXP))
        else:
            tensors[blk + "ffn_gate.weight"] = matrix(N_FF, N_EMBD)
            tensors[blk + "ffn_up.weight"] = matrix(N_FF, N_EMBD)
            tensors[blk + "ffn_down.weight"] = matrix(N_EMBD, N_FF)
        if args.arch == "gemma3":
            tensors[blk + "post_ffw_norm.weight"] = norm(N_EMBD)
    tensors["output_norm.weight"] = norm(N_EMBD)
    tensors["output.weight"] = matrix(n_vocab, N_EMBD, 3.0)  # logits std ~3

    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
