//! Decoding by context bucket: one decode plan per attention window, so a
//! decode step reads only the cache rows a short sequence can use instead of
//! all `n_ctx` of them (plans are fixed-shape; the KV cache is not).
//!
//! The buckets of a context of `n_ctx` rows are `min, 2·min, 4·min, …` below
//! `n_ctx`, then `n_ctx` itself ([`context_buckets`]; `min` = 128 by default,
//! a power of two). A step over `n_past` cached tokens runs the plan of the
//! smallest bucket holding `n_past + 1` rows ([`bucket_for`]); [`DecodePlans`]
//! compiles and loads that plan the first time it is needed and drops the
//! previous one (positions only grow within a generation, so a smaller bucket
//! is never needed again).
//!
//! Invariants:
//! - buckets ascend strictly and the last is `n_ctx`, so every `rows <= n_ctx`
//!   has a bucket;
//! - every bucket's plan declares the same state tensors as the prefill plan
//!   (`models::llama::build_cached_attending` keeps the full `n_ctx`-row
//!   caches), so all plans loaded through one [`Session`] share one KV cache;
//! - the rows a bucket leaves out are rows the mask would hide anyway, and the
//!   runtime's one-column products do not depend on how many rows they have
//!   (`runtime::device::cpu::matmul::float`), so a step's logits are, to the bit,
//!   those of a full-context plan (tests/runtime_windows.rs; end to end in
//!   cli/tests/models.rs; on the graphs in tests/llama_cache.rs).

use super::session::Session;
use crate::{Error, Result};
use models::llama::{self, CacheConfig, LlamaConfig};
use runtime::{Runtime, Weights};
use std::time::Instant;

/// The smallest bucket `ggplan generate` uses unless told otherwise.
pub const DEFAULT_MIN_BUCKET: i64 = 128;

/// The buckets of a context of `n_ctx` rows: `min_bucket` doubled while below
/// `n_ctx`, then `n_ctx` (just `[n_ctx]` when `min_bucket >= n_ctx`). Fails
/// unless `n_ctx >= 1` and `min_bucket` is a power of two.
pub fn context_buckets(n_ctx: i64, min_bucket: i64) -> Result<Vec<i64>> {
    if n_ctx < 1 {
        return Err(Error::Usage(format!(
            "the context must hold at least one row, not {n_ctx}"
        )));
    }
    if min_bucket < 1 || !(min_bucket as u64).is_power_of_two() {
        return Err(Error::Usage(format!(
            "the smallest bucket must be a power of two, not {min_bucket}"
        )));
    }
    let mut buckets = Vec::new();
    let mut rows = min_bucket;
    while rows < n_ctx {
        buckets.push(rows);
        rows = rows.saturating_mul(2);
    }
    buckets.push(n_ctx);
    Ok(buckets)
}

/// The smallest of `buckets` (ascending) that holds `rows` rows, if any.
pub fn bucket_for(buckets: &[i64], rows: i64) -> Option<i64> {
    buckets.iter().copied().find(|&b| b >= rows)
}

/// A decode plan loaded during generation.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketLoad {
    /// Cache rows the plan attends over.
    pub attend: i64,
    /// Position of the first token it decoded.
    pub first_position: i64,
    /// Compiling (graph and plan) and loading it, in milliseconds.
    pub load_ms: f64,
}

/// The one-token decode plans of a generation, one per bucket, loaded on
/// first use (see the module doc).
pub struct DecodePlans<'a> {
    session: &'a Session,
    weights: &'a Weights,
    /// The model at one token per step.
    config: LlamaConfig,
    cache: CacheConfig,
    buckets: Vec<i64>,
    /// The bucket in use and its runtime.
    current: Option<(i64, Runtime)>,
    loads: Vec<BucketLoad>,
}

impl<'a> DecodePlans<'a> {
    /// Decode plans of `config` (its `n_tokens` is replaced by 1) over
    /// `cache`, in `buckets` (from [`context_buckets`] for `cache.n_ctx`),
    /// loaded through `session` with `weights`. Nothing is compiled yet.
    pub fn new(
        session: &'a Session,
        weights: &'a Weights,
        config: &LlamaConfig,
        cache: CacheConfig,
        buckets: Vec<i64>,
    ) -> DecodePlans<'a> {
        DecodePlans {
            session,
            weights,
            config: LlamaConfig {
                n_tokens: 1,
                ..config.clone()
            },
            cache,
            buckets,
            current: None,
            loads: Vec::new(),
        }
    }

    /// The runtime for one token after `n_past` cached tokens (the smallest
    /// bucket holding `n_past + 1` rows, compiled and loaded if it is not the
    /// current one) and the rows it attends over. Fails when no bucket holds
    /// the token (past `n_ctx`) or the plan does not load.
    pub fn for_step(&mut self, n_past: i64) -> Result<(&mut Runtime, i64)> {
        let rows = n_past.saturating_add(1);
        let Some(attend) = bucket_for(&self.buckets, rows) else {
            return Err(Error::Usage(format!(
                "no decode bucket holds {rows} rows: the context is {} rows",
                self.cache.n_ctx
            )));
        };
        let current = match self.current.take() {
            Some((a, runtime)) if a == attend => runtime,
            // A new bucket: the old plan (dropped here, freeing its arenas)
            // is never needed again.
            old => {
                drop(old);
                self.load(attend, n_past)?
            }
        };
        let (attend, runtime) = self.current.insert((attend, current));
        Ok((runtime, *attend))
    }

    /// Compiles and loads the plan of bucket `attend`, first used at `n_past`.
    fn load(&mut self, attend: i64, n_past: i64) -> Result<Runtime> {
        let start = Instant::now();
        let graph = llama::build_cached_attending(&self.config, &self.cache, attend)?;
        let runtime = self.session.load(&graph, self.weights, None)?;
        let load_ms = start.elapsed().as_secs_f64() * 1e3;
        tracing::info!(
            attend,
            position = n_past,
            kernels_compiled = self.session.kernels_compiled(),
            "decode bucket switch at position {n_past}: plan over {attend} of {} cache rows \
             compiled and loaded in {load_ms:.1} ms",
            self.cache.n_ctx
        );
        self.loads.push(BucketLoad {
            attend,
            first_position: n_past,
            load_ms,
        });
        Ok(runtime)
    }

    /// The plans loaded so far, in order.
    pub fn loads(&self) -> &[BucketLoad] {
        &self.loads
    }

    /// Seconds spent compiling and loading plans so far.
    pub fn load_seconds(&self) -> f64 {
        self.loads.iter().map(|l| l.load_ms).sum::<f64>() / 1e3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_from_the_smallest_and_end_at_the_context() {
        let b = |n_ctx, min| context_buckets(n_ctx, min).unwrap();
        assert_eq!(b(512, 128), [128, 256, 512]);
        assert_eq!(b(600, 128), [128, 256, 512, 600]);
        assert_eq!(b(2048, 128), [128, 256, 512, 1024, 2048]);
        assert_eq!(b(128, 128), [128]);
        assert_eq!(b(64, 128), [64]);
        assert_eq!(b(100, 128), [100]);
        assert_eq!(b(64, 16), [16, 32, 64]);
        assert_eq!(b(1, 1), [1]);
        assert_eq!(b(i64::MAX, 1 << 62), [1 << 62, i64::MAX]);
    }

    #[test]
    fn bad_bucket_requests_are_errors() {
        for (n_ctx, min) in [(512, 0), (512, -128), (512, 100), (0, 128), (-1, 128)] {
            assert!(context_buckets(n_ctx, min).is_err(), "{n_ctx} {min}");
        }
        let msg = context_buckets(512, 100).unwrap_err().to_string();
        assert!(msg.contains("power of two") && msg.contains("100"), "{msg}");
    }

    #[test]
    fn a_step_takes_the_smallest_bucket_holding_its_rows() {
        let buckets = [128, 256, 512, 600];
        assert_eq!(bucket_for(&buckets, 1), Some(128));
        assert_eq!(bucket_for(&buckets, 128), Some(128));
        assert_eq!(bucket_for(&buckets, 129), Some(256));
        assert_eq!(bucket_for(&buckets, 513), Some(600));
        assert_eq!(bucket_for(&buckets, 600), Some(600));
        assert_eq!(bucket_for(&buckets, 601), None);
    }
}
