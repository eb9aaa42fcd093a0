//! `LlamaConfig::from_gguf` over the llama family (llama, mistral, qwen2) on
//! small synthetic GGUF files, and the cached graphs of the real SmolLM2 file.

use ggplan_tests::generation::step_bindings;
use ggplan_tests::gguf_writer::{Meta, Scratch, write_gguf};
use ggplan_tests::models::smollm2_gguf;
use ir::files::gguf::GgufFile;
use ir::{DType, Graph, Role, RopeMode, RopeParams};
use kernels::evaluate::{Bindings, Weights, evaluate};
use models::llama::{self, BlockWeight, CacheConfig, LlamaConfig, LlamaNames};
use std::collections::BTreeMap;
use std::path::Path;

/// What a synthetic file holds besides the common 1-layer model (8 wide, 2
/// heads over 1 KV head of width 4, n_ff 12, vocab 16).
#[derive(Default)]
struct Options {
    bias: bool,
    output: bool,
    extra: Vec<(&'static str, Meta)>,
    /// Tensors to replace (same name, new shape) or, with `None`, drop.
    edit: Vec<(&'static str, Option<[u64; 2]>)>,
    /// Tensors to add after the model's own.
    add: Vec<(&'static str, [u64; 2])>,
}

fn tiny(dir: &Path, arch: &'static str, o: Options) -> GgufFile {
    let key = |k: &str| -> &'static str { Box::leak(format!("{arch}.{k}").into_boxed_str()) };
    let mut kvs = vec![
        ("general.architecture", Meta::Str(arch)),
        (key("block_count"), Meta::U32(1)),
        (key("embedding_length"), Meta::U32(8)),
        (key("attention.head_count"), Meta::U32(2)),
        (key("attention.head_count_kv"), Meta::U32(1)),
        (key("feed_forward_length"), Meta::U32(12)),
        (key("attention.layer_norm_rms_epsilon"), Meta::F32(1e-6)),
    ];
    kvs.extend(o.extra.into_iter().map(|(k, v)| (key(k), v)));
    let names = LlamaNames::Gguf;
    let mut tensors = vec![(names.token_embd(), [8, 16])];
    for w in BlockWeight::ALL {
        use BlockWeight as B;
        let ne = match w {
            B::AttnNorm | B::FfnNorm => [8, 1],
            B::Wq | B::Wo => [8, 8],
            B::Wk | B::Wv => [8, 4],
            B::FfnGate | B::FfnUp => [8, 12],
            B::FfnDown => [12, 8],
        };
        tensors.push((names.block(0, w), ne));
        if o.bias && matches!(w, B::Wq | B::Wk | B::Wv) {
            tensors.push((names.bias(0, w), [ne[1], 1]));
        }
    }
    tensors.push((names.output_norm(), [8, 1]));
    if o.output {
        tensors.push((names.output(), [8, 16]));
    }
    for (name, ne) in o.edit {
        let i = tensors
            .iter()
            .position(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no tensor {name} to edit"));
        match ne {
            Some(ne) => tensors[i].1 = ne,
            None => {
                tensors.remove(i);
            }
        }
    }
    tensors.extend(o.add.into_iter().map(|(n, ne)| (n.to_string(), ne)));
    let path = dir.join(format!("tiny-{arch}.gguf"));
    write_gguf(&path, &kvs, &tensors);
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `cfg`'s decode graph (first token) with the file's weights: every
/// weight must bind by name, dtype and shape.
fn decode_binds(cfg: &LlamaConfig, file: &GgufFile) {
    let cache = CacheConfig {
        n_ctx: 8,
        kv_dtype: DType::F16,
    };
    let g = llama::build_cached(
        &LlamaConfig {
            n_tokens: 1,
            ..cfg.clone()
        },
        &cache,
    )
    .unwrap();
    let inputs = step_bindings(&[5], 0, (cache.n_ctx, cache.n_ctx), BTreeMap::new());
    let bindings = Bindings {
        weights: Weights::File(file),
        inputs,
        random_inputs: None,
    };
    let memory = evaluate(&g, &bindings).unwrap_or_else(|e| panic!("{e}"));
    let logits = memory.read(g.find(llama::LOGITS).unwrap());
    assert_eq!(logits.ne, [cfg.n_vocab, 1, 1, 1]);
}

#[test]
fn qwen2_reads_neox_rope_biases_and_tied_output() {
    let scratch = Scratch::new("qwen2");
    let opts = Options {
        bias: true,
        extra: vec![("rope.freq_base", Meta::F32(1e6))],
        ..Options::default()
    };
    let file = tiny(&scratch.0, "qwen2", opts);
    let cfg = LlamaConfig::from_gguf(&file, 3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.rope, RopeParams::plain(RopeMode::Neox, 4, 1e6));
    assert_eq!(
        (cfg.qkv_bias, cfg.tied_output, cfg.n_head_kv, cfg.rms_eps),
        (true, true, 1, 1e-6)
    );
    decode_binds(&cfg, &file);
}

/// Llama 3's `rope_freqs.weight` makes every q and k rope read it as its
/// frequency factors.
#[test]
fn llama3_reads_rope_frequency_factors() {
    let scratch = Scratch::new("llama3");
    let opts = Options {
        add: vec![("rope_freqs.weight", [2, 1])],
        ..Options::default()
    };
    let file = tiny(&scratch.0, "llama", opts);
    let cfg = LlamaConfig::from_gguf(&file, 3).unwrap_or_else(|e| panic!("{e}"));
    assert!(cfg.rope_factors);
    let g = llama::build_prefill(&cfg).unwrap();
    let factors = g
        .find("rope_freqs.weight")
        .expect("the factors are a weight");
    assert_eq!(g.tensor(factors).role, Role::Weight);
    let ropes: Vec<_> = (g.tensors().iter())
        .filter(|t| matches!(t.op, Some(ir::Op::Rope(_))))
        .collect();
    assert_eq!(ropes.len(), 2, "q and k of the one block");
    assert!(
        ropes
            .iter()
            .all(|t| t.srcs.len() == 3 && t.srcs[2] == factors)
    );
}

#[test]
fn mistral_reads_llama_names_partial_rope_and_untied_output() {
    let scratch = Scratch::new("mistral");
    let opts = Options {
        output: true,
        extra: vec![("rope.dimension_count", Meta::U32(2))],
        ..Options::default()
    };
    let file = tiny(&scratch.0, "mistral", opts);
    let cfg = LlamaConfig::from_gguf(&file, 3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.rope, RopeParams::plain(RopeMode::Normal, 2, 10000.0));
    assert_eq!((cfg.qkv_bias, cfg.tied_output), (false, false));
    decode_binds(&cfg, &file);
}

#[test]
fn unknown_architectures_and_bad_tensors_are_named() {
    let scratch = Scratch::new("bad-gguf");
    let err = |arch, opts| {
        let file = tiny(&scratch.0, arch, opts);
        LlamaConfig::from_gguf(&file, 3).unwrap_err().to_string()
    };
    let e = err("phi3", Options::default());
    assert!(
        e.contains("'phi3'") && e.contains("tiny-phi3.gguf") && e.contains("llama, mistral, qwen2"),
        "{e}"
    );

    let e = err(
        "llama",
        Options {
            edit: vec![("blk.0.attn_k.weight", Some([8, 8]))],
            ..Options::default()
        },
    );
    assert!(
        e.contains("tiny-llama.gguf")
            && e.contains("'blk.0.attn_k.weight'")
            && e.contains("[8, 8")
            && e.contains("[8, 4"),
        "{e}"
    );

    let e = err(
        "qwen2",
        Options {
            bias: true,
            edit: vec![("blk.0.attn_v.bias", None)],
            ..Options::default()
        },
    );
    assert!(
        e.contains("tiny-qwen2.gguf") && e.contains("missing tensor 'blk.0.attn_v.bias'"),
        "{e}"
    );

    let e = err(
        "qwen2",
        Options {
            bias: true,
            edit: vec![("blk.0.attn_q.bias", Some([4, 1]))],
            ..Options::default()
        },
    );
    assert!(e.contains("'blk.0.attn_q.bias'") && e.contains("[4"), "{e}");

    let e = err(
        "mistral",
        Options {
            extra: vec![("rope.dimension_count", Meta::U32(6))],
            ..Options::default()
        },
    );
    assert!(
        e.contains("'mistral.rope.dimension_count'") && e.contains("tiny-mistral.gguf"),
        "{e}"
    );

    // A tensor the builder has no use for (a mixture of experts' expert
    // matrices): binding the rest would compute another model.
    let e = err(
        "llama",
        Options {
            add: vec![("blk.0.ffn_gate_exps.weight", [8, 12])],
            ..Options::default()
        },
    );
    assert!(
        e.contains("tiny-llama.gguf")
            && e.contains("does not use tensor 'blk.0.ffn_gate_exps.weight'")
            && e.contains("refused"),
        "{e}"
    );
    // Llama 3's rope frequency factors of the wrong length (n_rot / 2 = 2).
    let e = err(
        "llama",
        Options {
            add: vec![("rope_freqs.weight", [3, 1])],
            ..Options::default()
        },
    );
    assert!(
        e.contains("rope_freqs.weight") && e.contains("[2, 1, 1, 1]"),
        "{e}"
    );
    let e = err(
        "llama",
        Options {
            add: vec![("a.weight", [2, 1]), ("b.weight", [2, 1])],
            ..Options::default()
        },
    );
    assert!(e.contains("tensors 'a.weight' and 'b.weight'"), "{e}");

    // A hyperparameter the builder does not read, and a vocabulary size that
    // disagrees with the embedding.
    let e = err(
        "llama",
        Options {
            extra: vec![
                ("rope.scaling.factor", Meta::F32(8.0)),
                ("attention.sliding_window", Meta::U32(4096)),
            ],
            ..Options::default()
        },
    );
    assert!(
        e.contains("'llama.attention.sliding_window', 'llama.rope.scaling.factor'")
            && e.contains("does not model"),
        "{e}"
    );
    let e = err(
        "llama",
        Options {
            extra: vec![("vocab_size", Meta::U32(17))],
            ..Options::default()
        },
    );
    assert!(
        e.contains("'llama.vocab_size'") && e.contains("16 rows"),
        "{e}"
    );

    // Experts outside qwen3moe and llama (Mixtral) are refused by name.
    let e = err(
        "mistral",
        Options {
            extra: vec![("expert_count", Meta::U32(8))],
            ..Options::default()
        },
    );
    assert!(
        e.contains("mistral.expert_count is 8") && e.contains("mixture-of-experts"),
        "{e}"
    );
    // A llama file with experts is Mixtral, which needs its used count.
    let e = err(
        "llama",
        Options {
            extra: vec![("expert_count", Meta::U32(8))],
            ..Options::default()
        },
    );
    assert!(e.contains("'llama.expert_used_count'"), "{e}");
}

/// (name, dtype, ne) of every state tensor.
fn states(g: &Graph) -> Vec<(String, DType, [i64; 4])> {
    g.with_role(Role::State)
        .map(|id| {
            (
                g.tensor(id).name.clone(),
                g.tensor(id).dtype(),
                g.tensor(id).ne(),
            )
        })
        .collect()
}

#[test]
fn smollm2_cached_graphs_build_and_verify() {
    let Some(path) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not found (GGPLAN_SMOLLM2_GGUF); run scripts/setup.sh");
        return;
    };
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let cache = CacheConfig {
        n_ctx: 64,
        kv_dtype: DType::F32,
    };
    let mut graphs = Vec::new();
    for n_tokens in [16, 1] {
        let cfg = LlamaConfig::from_gguf(&file, n_tokens).unwrap_or_else(|e| panic!("{e}"));
        assert!(!cfg.qkv_bias && cfg.tied_output);
        let g = llama::build_cached(&cfg, &cache).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ir::verify::verify(&g), vec![]);
        assert_eq!(
            g.tensor(g.find(llama::LOGITS).unwrap()).ne(),
            [49152, n_tokens, 1, 1]
        );
        graphs.push(g);
    }
    let state = states(&graphs[0]);
    assert_eq!(state.len(), 60);
    assert_eq!(state[0], ("l0.cache_k".into(), DType::F32, [192, 64, 1, 1]));
    assert_eq!(state[1], ("l0.cache_v".into(), DType::F32, [64, 192, 1, 1]));
    assert_eq!(
        state,
        states(&graphs[1]),
        "prefill and decode share the cache"
    );
}
