//! The reference evaluator on a llama graph against an independent, naive
//! per-token forward pass written out here with plain loops: the graph builder
//! (GQA, rope, causal mask, swiglu, tied output), the shape rules and the
//! reference kernels must agree with a formulation that shares none of them.

use ir::{DType, Graph, RopeMode, RopeParams};
use kernels::evaluate::{Bindings, Memory, Weights, evaluate};
use models::llama::{BlockWeight, LlamaConfig, LlamaNames, build_prefill};
use std::collections::BTreeMap;

fn config(weight_dtype: DType, tied_output: bool) -> LlamaConfig {
    LlamaConfig {
        n_layer: 2,
        n_embd: 48,
        n_head: 6,
        n_head_kv: 2,
        head_dim: 8,
        n_ff: 40,
        n_vocab: 50,
        n_tokens: 7,
        rms_eps: 1e-5,
        rope: RopeParams::plain(RopeMode::Normal, 8, 10000.0),
        weight_dtype,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::F32,
        tied_output,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: models::llama::QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    }
}

/// A tensor's values as [rows][ne0] (weights are 2-D here).
fn rows(g: &Graph, m: &Memory<'_>, name: &str) -> Vec<Vec<f64>> {
    let id = g.find(name).unwrap_or_else(|| panic!("no tensor {name}"));
    let d = m.read(id);
    d.data
        .chunks(d.ne[0] as usize)
        .map(<[f64]>::to_vec)
        .collect()
}

fn matvec(w: &[Vec<f64>], x: &[f64]) -> Vec<f64> {
    w.iter()
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, g)| v * s * g).collect()
}

/// Rotates adjacent pairs of each head (rope mode 0).
fn rope(x: &mut [f64], head_dim: usize, pos: f64, base: f64) {
    for head in x.chunks_mut(head_dim) {
        for i in 0..head_dim / 2 {
            let theta = pos * base.powf(-2.0 * i as f64 / head_dim as f64);
            let (c, s) = (theta.cos(), theta.sin());
            let (a, b) = (head[2 * i], head[2 * i + 1]);
            head[2 * i] = a * c - b * s;
            head[2 * i + 1] = a * s + b * c;
        }
    }
}

fn naive_forward(cfg: &LlamaConfig, g: &Graph, m: &Memory<'_>, tokens: &[usize]) -> Vec<Vec<f64>> {
    let n = cfg.names;
    let (hd, nh, nkv) = (
        cfg.head_dim as usize,
        cfg.n_head as usize,
        cfg.n_head_kv as usize,
    );
    let eps = f64::from(cfg.rms_eps);
    let embd = rows(g, m, &n.token_embd());
    let mut xs: Vec<Vec<f64>> = tokens.iter().map(|&t| embd[t].clone()).collect();
    for il in 0..cfg.n_layer {
        let w = |bw| rows(g, m, &n.block(il, bw));
        let (attn_norm, wq, wk, wv, wo) = (
            w(BlockWeight::AttnNorm),
            w(BlockWeight::Wq),
            w(BlockWeight::Wk),
            w(BlockWeight::Wv),
            w(BlockWeight::Wo),
        );
        let (ffn_norm, gate, up, down) = (
            w(BlockWeight::FfnNorm),
            w(BlockWeight::FfnGate),
            w(BlockWeight::FfnUp),
            w(BlockWeight::FfnDown),
        );
        let (mut q, mut k, mut v) = (vec![], vec![], vec![]);
        for (t, x) in xs.iter().enumerate() {
            let h = rms_norm(x, &attn_norm[0], eps);
            let (mut qt, mut kt) = (matvec(&wq, &h), matvec(&wk, &h));
            rope(&mut qt, hd, t as f64, f64::from(cfg.rope.freq_base));
            rope(&mut kt, hd, t as f64, f64::from(cfg.rope.freq_base));
            q.push(qt);
            k.push(kt);
            v.push(matvec(&wv, &h));
        }
        for t in 0..xs.len() {
            let mut merged = vec![0.0; nh * hd];
            for head in 0..nh {
                let kv = head / (nh / nkv);
                let qh = &q[t][head * hd..(head + 1) * hd];
                let scores: Vec<f64> = (0..=t)
                    .map(|u| {
                        qh.iter()
                            .zip(&k[u][kv * hd..(kv + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (u, p) in e.iter().enumerate() {
                    for d in 0..hd {
                        merged[head * hd + d] += p / sum * v[u][kv * hd + d];
                    }
                }
            }
            let attn = matvec(&wo, &merged);
            let x: Vec<f64> = xs[t].iter().zip(&attn).map(|(a, b)| a + b).collect();
            let h = rms_norm(&x, &ffn_norm[0], eps);
            let act: Vec<f64> = matvec(&gate, &h)
                .iter()
                .zip(matvec(&up, &h))
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            xs[t] = x
                .iter()
                .zip(matvec(&down, &act))
                .map(|(a, b)| a + b)
                .collect();
        }
    }
    let out_norm = rows(g, m, &n.output_norm());
    let head = if cfg.tied_output {
        embd
    } else {
        rows(g, m, &n.output())
    };
    xs.iter()
        .map(|x| matvec(&head, &rms_norm(x, &out_norm[0], eps)))
        .collect()
}

fn check(cfg: &LlamaConfig, max_abs_allowed: f64) {
    let g = build_prefill(cfg).unwrap();
    let tokens: Vec<usize> = vec![3, 17, 42, 0, 49, 17, 8];
    let mut inputs = BTreeMap::new();
    let tok = kernels::reference::Dense {
        ne: [7, 1, 1, 1],
        data: tokens.iter().map(|&t| t as f64).collect(),
    };
    inputs.insert(models::llama::TOKENS.to_string(), tok);
    let bindings = Bindings {
        weights: Weights::Random { seed: 11 },
        inputs,
        random_inputs: None,
    };
    let m = evaluate(&g, &bindings).unwrap();
    let logits = m.read(g.find(models::llama::LOGITS).unwrap());
    let want = naive_forward(cfg, &g, &m, &tokens);
    let mut max_abs = 0.0f64;
    for (t, row) in want.iter().enumerate() {
        for (j, w) in row.iter().enumerate() {
            let have = logits.data[t * cfg.n_vocab as usize + j];
            max_abs = max_abs.max((have - w).abs());
        }
    }
    // The graph stores activations in f32; the naive pass is all f64.
    assert!(max_abs < max_abs_allowed, "max abs difference {max_abs}");
}

#[test]
fn f32_llama_with_gqa_matches_a_naive_forward() {
    check(&config(DType::F32, false), 1e-5);
}

#[test]
fn quantized_tied_llama_matches_a_naive_forward_on_the_dequantized_weights() {
    // Q8_0 rows need ne0 % 32 == 0 for every weight, Wo's n_head * head_dim included.
    let cfg = LlamaConfig {
        n_embd: 64,
        n_ff: 96,
        n_head: 4,
        head_dim: 16,
        rope: RopeParams::plain(RopeMode::Normal, 16, 10000.0),
        ..config(DType::Q8_0, true)
    };
    check(&cfg, 1e-5);
}
