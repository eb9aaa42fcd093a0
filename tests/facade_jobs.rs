//! The facade's model jobs on the real models: `ggplan::Generator` streams
//! the load, the prompt and then the generated text, and stops at
//! `max_tokens`; `ggplan::Embedder` gives unit-length embeddings whose
//! similarities order sentences by meaning. Skipped (with a line saying so)
//! when `scripts/setup.sh` has not installed the models.

use ggplan::jobs::{GenerateEvent, cosine};
use ggplan::{Embedder, GenerateOptions, Generator};
use ggplan_tests::models::{minilm_dir, smollm2_gguf};

#[test]
fn the_generator_streams_the_load_then_the_prompt_then_the_tokens() {
    let Some(path) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not installed (scripts/setup.sh installs it)");
        return;
    };
    let options = GenerateOptions {
        ctx: 64,
        min_bucket: 16,
        threads: Some(2),
        ..Default::default()
    };
    let mut generator = Generator::open(path, options).expect("opens");
    assert_eq!(generator.buckets(), [16, 32, 64]);
    let mut events = Vec::new();
    let generation = generator
        .generate("Once upon a time", 6, &mut |e| {
            events.push(match e {
                GenerateEvent::Loaded { n_vocab, .. } => format!("loaded {n_vocab}"),
                GenerateEvent::Text(t) => t.to_string(),
            })
        })
        .expect("generates");
    assert_eq!(events[0], "loaded 49152");
    assert_eq!(events[1], "Once upon a time");
    assert_eq!(events[2..].concat(), generation.text);
    assert_eq!(generation.generated_ids.len(), 6);
    assert_eq!(generation.decode_steps, 5);
    // The last position's logits only, as llama.cpp computes a prefill.
    assert_eq!(generation.prompt_logits.len(), generation.n_vocab);
    assert_eq!(
        generation.decode_plans.len(),
        1,
        "{:?}",
        generation.decode_plans
    );
    let too_long = "word ".repeat(100);
    let refused = generator.generate(&too_long, 1, &mut |_| {}).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("longer than the context of 64"),
        "{refused}"
    );
}

#[test]
fn the_embedder_orders_sentences_by_meaning() {
    let Some(dir) = minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not installed (scripts/setup.sh installs it)");
        return;
    };
    let mut embedder = Embedder::open_hf(dir, Some(2)).expect("opens");
    let mut embed = |s: &str| embedder.embed(s).expect("embeds").values;
    let cat = embed("A cat sits on the mat.");
    let kitten = embed("A kitten is sitting on a rug.");
    let market = embed("Stock markets fell sharply today.");
    let norm: f64 = cat
        .iter()
        .map(|v| f64::from(*v).powi(2))
        .sum::<f64>()
        .sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    assert!(cosine(&cat, &kitten) > cosine(&cat, &market) + 0.2);
}
