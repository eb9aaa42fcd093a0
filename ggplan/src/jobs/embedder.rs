//! Sentence embeddings with a BERT encoder (all-MiniLM-L6-v2 style: mean or
//! `[CLS]` pooling, L2 normalisation) on the CPU runtime, from a Hugging Face
//! folder or a GGUF file. Each sentence gets a plan for its token count
//! (plans are fixed-shape); kernels are compiled once per session.

use super::session::{Progress, Session};
use crate::{Error, Result};
use ir::files::gguf::GgufFile;
use models::bert::{self, BertConfig};
use models::{Family, Tokenizer};
use runtime::{Precision, Weights};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the encoder's configuration comes from.
enum Source {
    Hf(PathBuf),
    Gguf(GgufFile),
}

/// One sentence's embedding.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// The embedding (L2-normalised when the model says so).
    pub values: Vec<f32>,
    /// Tokens the sentence became.
    pub tokens: usize,
    /// Seconds the encoder's plan ran (compiling and loading excluded).
    pub run_seconds: f64,
}

/// Sentence embeddings with one BERT encoder.
///
/// ```no_run
/// let mut embedder = ggplan::Embedder::open_hf("all-MiniLM-L6-v2", None)?;
/// let a = embedder.embed("A cat sits on the mat.")?.values;
/// let b = embedder.embed("A kitten is on a rug.")?.values;
/// println!("similarity {:.3}", ggplan::jobs::cosine(&a, &b));
/// # Ok::<(), ggplan::Error>(())
/// ```
pub struct Embedder {
    tokenizer: Tokenizer,
    weights: Weights,
    source: Source,
    session: Session,
    progress: Option<Progress>,
}

impl Embedder {
    /// A Hugging Face folder (`config.json`, `tokenizer.json`,
    /// `model.safetensors`), on `threads` threads (`None`: all cores).
    pub fn open_hf(dir: impl AsRef<Path>, threads: Option<usize>) -> Result<Embedder> {
        let dir = dir.as_ref();
        let tokenizer = Tokenizer::from_hf_file(&dir.join("tokenizer.json"))
            .map_err(|e| Error::Usage(format!("{}: reading the tokenizer: {e}", dir.display())))?;
        let weights = Weights::open(dir.join("model.safetensors"))?;
        Embedder::with(tokenizer, weights, Source::Hf(dir.to_path_buf()), threads)
    }

    /// A BERT GGUF (as llama.cpp's converter writes them); a decoder's file
    /// is refused, naming its architecture.
    pub fn open_gguf(path: impl AsRef<Path>, threads: Option<usize>) -> Result<Embedder> {
        let path = path.as_ref();
        let file = GgufFile::open(path)?;
        if Family::of(&file)? != Family::Bert {
            return Err(Error::Usage(format!(
                "{}: architecture '{}' is a decoder; embeddings need a BERT encoder \
                 (architecture 'bert'); generate text with a decoder instead",
                path.display(),
                file.architecture().unwrap_or("?")
            )));
        }
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let weights = Weights::open(path)?;
        Embedder::with(tokenizer, weights, Source::Gguf(file), threads)
    }

    fn with(
        tokenizer: Tokenizer,
        weights: Weights,
        source: Source,
        threads: Option<usize>,
    ) -> Result<Embedder> {
        Ok(Embedder {
            tokenizer,
            weights,
            source,
            // Encoders have float weights: exact products cost nothing extra.
            session: Session::new(threads, Precision::Exact)?,
            progress: None,
        })
    }

    /// This embedder with its plans compiled for `target` (`cuda0`, a core
    /// group split, ...) instead of `cpu`.
    pub fn on_target(mut self, target: crate::target::Target) -> Result<Embedder> {
        let threads = Some(self.session.threads());
        self.session = Session::for_target(
            threads,
            Precision::Exact,
            target,
            crate::CompileOptions::default(),
        )?;
        Ok(self)
    }

    /// Shows each plan's kernel preparation to `progress` (a progress bar);
    /// `None` stops showing it.
    pub fn set_progress(&mut self, progress: Option<Progress>) {
        self.progress = progress;
    }

    /// Threads the plans run on.
    pub fn threads(&self) -> usize {
        self.session.threads()
    }

    /// The embedding of `sentence`.
    pub fn embed(&mut self, sentence: &str) -> Result<Embedding> {
        let ids = self.tokenizer.encode(sentence)?;
        if ids.is_empty() {
            return Err(Error::Usage(format!("sentence {sentence:?} has no tokens")));
        }
        let n_tokens = ids.len() as i64;
        let config = match &self.source {
            Source::Hf(dir) => BertConfig::from_hf_dir(dir, n_tokens)?,
            Source::Gguf(file) => BertConfig::from_gguf(file, n_tokens)?,
        };
        let graph = bert::build_encoder(&config)?;
        let mut rt = self
            .session
            .load(&graph, &self.weights, self.progress.clone())?;
        let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        rt.set_input_i32(bert::TOKENS, &ids)?;
        let t = Instant::now();
        rt.run()?;
        let run_seconds = t.elapsed().as_secs_f64();
        Ok(Embedding {
            values: rt.output_f32(bert::EMBEDDING)?,
            tokens: ids.len(),
            run_seconds,
        })
    }
}

/// Cosine similarity of two embeddings, in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b)).max(f64::MIN_POSITIVE)
}
