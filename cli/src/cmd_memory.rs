//! `ggplan memory`: draw a plan's compute arenas over time as SVG and say
//! where the peak is.

use crate::memory_svg::{mib, render};
use crate::memory_timeline::{ArenaTimeline, Timeline, timeline};
use anyhow::{Context, Result, anyhow};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan memory`.
#[derive(Args)]
#[command(
    after_help = "Example:\n  ggplan compile examples/graphs/llama2l.ron --target cpu -o llama2l.plan.ron\n  \
    ggplan memory llama2l.plan.ron -o llama2l-memory.svg"
)]
pub struct MemoryArgs {
    /// The plan file.
    plan: PathBuf,
    /// Where to write the SVG drawing.
    #[arg(short, long, value_name = "FILE.svg")]
    output: PathBuf,
}

/// The paragraph printed for one compute arena.
pub fn summary(tl: &Timeline, a: &ArenaTimeline) -> String {
    let Some((g, bytes)) = a.peak else {
        return format!(
            "{} compute arena: {} and no step, so no peak.",
            a.device_name,
            mib(a.size)
        );
    };
    let at = tl.steps.get(g).map_or("?", String::as_str);
    let bound = a.lower_bound.map_or_else(
        || "no recorded lower bound".to_string(),
        |lb| format!("the recorded lower bound is {} ({lb} bytes)", mib(lb)),
    );
    let largest: Vec<String> = a
        .alive_at(g)
        .iter()
        .take(3)
        .map(|b| format!("{} ({})", b.name, mib(b.bytes)))
        .collect();
    let mut s = format!(
        "{} compute arena: peak at step {g} of {} ({at}) with {} live ({bytes} bytes) \
         in an arena of {} ({} bytes); {bound}. Largest live at the peak: {}.",
        a.device_name,
        tl.steps.len(),
        mib(bytes),
        mib(a.size),
        a.size,
        if largest.is_empty() {
            "none".to_string()
        } else {
            largest.join(", ")
        }
    );
    if !a.untouched.is_empty() {
        s += &format!(
            " {} tensors placed here are never touched by a step: {}.",
            a.untouched.len(),
            a.untouched.join(", ")
        );
    }
    s
}

/// Runs `ggplan memory`.
pub fn run(args: MemoryArgs) -> Result<ExitCode> {
    // The reader's error already names the file and the cause.
    let plan = ir::plan::read_plan(&args.plan).map_err(|e| anyhow!("cannot read the plan: {e}"))?;
    tracing::info!(
        tensors = plan.tensors.len(),
        splits = plan.splits.len(),
        "plan read"
    );
    let tl = timeline(&plan);
    let title = format!(
        "memory of graph '{}' on target '{}' [{}]",
        plan.graph_name,
        plan.target_name,
        plan.options.join(" ")
    );
    let svg = render(&tl, &title);
    ir::text::write_atomically(&args.output, svg.as_bytes())
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    tracing::debug!(bytes = svg.len(), "svg written");
    for a in &tl.compute {
        println!("{}", summary(&tl, a));
    }
    if tl.compute.is_empty() {
        println!("the plan has no compute arena.");
    }
    println!("wrote {}", args.output.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use compiler::pipeline::{CompileOptions, compile};
    use compiler::target::Target;
    use ir::plan::{Placement, Usage};

    fn llama2l_cpu() -> ir::plan::Plan {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/graphs/llama2l.ron");
        let graph = ir::text::read_graph(&path).expect("example graph");
        let target = Target::preset("cpu").expect("cpu preset");
        compile(&graph, &target, &CompileOptions::default())
            .expect("compiles")
            .plan
    }

    /// Checks that every tag opened is closed in order (a small XML scan).
    fn balanced(doc: &str) -> Result<usize, String> {
        let mut stack: Vec<String> = Vec::new();
        let mut count = 0;
        let mut rest = doc;
        while let Some(i) = rest.find('<') {
            rest = &rest[i + 1..];
            let j = rest.find('>').ok_or("unterminated tag")?;
            let tag = &rest[..j];
            rest = &rest[j + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if let Some(closing) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or(format!("stray </{closing}>"))?;
                if open != name {
                    return Err(format!("<{open}> closed by </{name}>"));
                }
            } else if !tag.ends_with('/') {
                stack.push(name);
            }
            count += 1;
        }
        if stack.is_empty() {
            Ok(count)
        } else {
            Err(format!("unclosed: {stack:?}"))
        }
    }

    #[test]
    fn llama2l_draws_every_compute_tensor_and_the_peak() {
        let plan = llama2l_cpu();
        let tl = timeline(&plan);
        let doc = render(&tl, "llama2l & <cpu>");
        balanced(&doc).expect("balanced tags");
        let compute_arenas: Vec<usize> = plan
            .arenas
            .iter()
            .enumerate()
            .filter(|(_, a)| a.usage == Usage::Compute)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(compute_arenas.len(), 1);
        let with_bytes = plan
            .tensors
            .iter()
            .filter(|t| {
                matches!(t.placement, Placement::Arena { arena, .. }
                    if compute_arenas.contains(&(arena as usize)))
            })
            .count();
        assert!(with_bytes > 10, "{with_bytes}");
        assert_eq!(doc.matches(r#"class="tensor""#).count(), with_bytes);
        assert_eq!(doc.matches("<title>").count(), with_bytes + 1);
        assert_eq!(doc.matches(r#"class="peak""#).count(), 1);
        assert!(doc.contains("llama2l &amp; &lt;cpu&gt;"));
        // The peak never exceeds the arena, and the compiler's bound (over
        // aligned buffers) is at least the bytes live at the peak minus alignment slack.
        let a = &tl.compute[0];
        let (g, peak) = a.peak.expect("a peak");
        assert!(peak <= a.size, "{peak} > {}", a.size);
        let lb = a.lower_bound.expect("recorded bound");
        assert!(lb <= a.size && peak <= lb, "peak {peak} bound {lb}");
        assert_eq!(a.live[g], peak);
        assert!(a.live.iter().all(|&b| b <= peak));
        // Deterministic.
        assert_eq!(doc, render(&timeline(&plan), "llama2l & <cpu>"));
        let text = summary(&tl, a);
        assert!(text.contains(&format!("peak at step {g}")), "{text}");
        assert_eq!(a.alive_at(g).len().min(3), text.matches(" MiB)").count());
    }

    #[test]
    fn outputs_live_to_the_end_and_copies_are_marked() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/graphs/llama2l.ron");
        let graph = ir::text::read_graph(&path).unwrap();
        let target = Target::preset("cpu+cuda0").unwrap();
        let mut opts = CompileOptions::default();
        opts.placement.offload_layers = Some(1);
        let plan = compile(&graph, &target, &opts).unwrap().plan;
        let tl = timeline(&plan);
        let last = tl.steps.len() - 1;
        let bars = tl.compute.iter().flat_map(|a| &a.bars);
        let mut copies = 0;
        for b in bars {
            let t = &plan.tensors[b.tensor as usize];
            if t.role == ir::Role::Output {
                assert_eq!(b.last, last, "{}", b.name);
            }
            copies += usize::from(t.copy_of.is_some());
            assert!(b.first <= b.last);
        }
        assert!(copies > 0);
        assert!(tl.split_starts.len() > 1);
        balanced(&render(&tl, "two devices")).unwrap();
    }
}
