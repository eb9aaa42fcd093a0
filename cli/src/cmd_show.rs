//! `ggplan show` and `ggplan explain`: reading a plan.

use anyhow::{Result, bail};
use clap::Args;
use ir::plan::{Placement, Plan, Step, Work};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `ggplan show`.
#[derive(Args)]
#[command(after_help = "Example:\n  ggplan show llama2l.plan.ron --json")]
pub struct ShowArgs {
    /// The plan file.
    plan: PathBuf,
    /// Print one JSON object of the stats instead.
    #[arg(long)]
    json: bool,
    /// Put the plan's splits, copies per link and compute memory beside
    /// llama.cpp's, from a capture (`scripts/llama-capture.sh run`).
    #[arg(long, value_name = "CAPTURE.json")]
    against: Option<PathBuf>,
}

/// Runs `ggplan show`.
pub fn run_show(args: ShowArgs) -> Result<ExitCode> {
    let plan = ir::plan::read_plan(&args.plan)?;
    let capture = (args.against.as_deref())
        .map(models::capture::read_capture)
        .transpose()?;
    if args.json {
        let mut json = ggplan::plan::summary_json(&plan);
        if let Some(capture) = &capture {
            json["against"] = ggplan::against::json(&plan, capture);
        }
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", ggplan::plan::summary(&plan));
        if let Some(capture) = &capture {
            print!("{}", ggplan::against::text(&plan, capture));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `ggplan explain`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  ggplan explain llama2l.plan.ron\n  ggplan explain llama2l.plan.ron l0.kq"
)]
pub struct ExplainArgs {
    /// The plan file.
    plan: PathBuf,
    /// One tensor to explain in detail (all tensors, one line each, when omitted).
    tensor: Option<String>,
}

/// A tensor's name; `?` for an index out of range (explain reads plans the
/// checker has not passed, to show what is wrong with them).
fn tensor_name(plan: &Plan, t: u32) -> &str {
    plan.tensors
        .get(t as usize)
        .map_or("?", |t| t.name.as_str())
}

fn placement_text(plan: &Plan, p: &Placement) -> String {
    match *p {
        Placement::Arena { arena, offset } => match plan.arenas.get(arena as usize) {
            Some(a) => format!(
                "{} arena of {} at {offset}",
                a.usage,
                plan.devices
                    .get(a.device.index())
                    .map_or("?", |d| d.name.as_str())
            ),
            None => format!("arena {arena} (missing) at {offset}"),
        },
        Placement::View { of, offset } => {
            let name = plan
                .tensors
                .get(of as usize)
                .map_or("?", |t| t.name.as_str());
            format!("view of '{name}' at +{offset}")
        }
        Placement::Fused => "inside a fused kernel (no memory)".to_string(),
    }
}

/// Runs `ggplan explain`.
pub fn run_explain(args: ExplainArgs) -> Result<ExitCode> {
    let plan = ir::plan::read_plan(&args.plan)?;
    let device = |t: &ir::plan::PlanTensor| {
        plan.devices
            .get(t.device.index())
            .map_or("?", |d| d.name.as_str())
            .to_string()
    };
    let Some(name) = args.tensor else {
        for t in &plan.tensors {
            println!(
                "{:<28} {:<6} {:<44} {}",
                t.name,
                device(t),
                placement_text(&plan, &t.placement),
                t.reason
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let Some(id) = plan.tensors.iter().position(|t| t.name == name) else {
        bail!("the plan has no tensor named '{name}'");
    };
    let t = &plan.tensors[id];
    println!(
        "{}: {} {:?} strides {:?}, role {}",
        t.name, t.dtype, t.ne, t.nb, t.role
    );
    println!("  device:    {} — {}", device(t), t.reason);
    println!("  placement: {}", placement_text(&plan, &t.placement));
    let id = id as u32;
    for item in plan.global_order() {
        let (reads, writes) = (item.reads(&plan.kernels), item.writes(&plan.kernels));
        let (s, k) = (item.split, item.position);
        let what = match item.work {
            Work::Copy(c) => {
                if c.src == id || c.dst == id {
                    let (src, dst) = (tensor_name(&plan, c.src), tensor_name(&plan, c.dst));
                    println!("  split {s}: copy '{src}' -> '{dst}' ({} bytes)", c.bytes);
                }
                continue;
            }
            Work::Step(Step::Op { op, .. }) => op.name().to_string(),
            Work::Step(Step::MulMatAdd { product, .. }) => {
                format!(
                    "mul_mat + add (its product '{}' is never stored)",
                    tensor_name(&plan, *product)
                )
            }
            Work::Step(Step::Attention { scores, probs, .. }) => {
                format!(
                    "attention (its scores '{}' and probabilities '{}' are never stored)",
                    tensor_name(&plan, *scores),
                    tensor_name(&plan, *probs)
                )
            }
            Work::Step(Step::MulMatMany { dsts, .. }) => format!("mul_mat x {}", dsts.len()),
            Work::Step(Step::RopeStore { dsts, .. }) => format!("rope + set_rows x {}", dsts.len()),
            Work::Step(Step::MulMatGlu { products, .. }) => {
                let [g, u] = products.map(|p| tensor_name(&plan, p));
                format!("mul_mat + glu (its products '{g}' and '{u}' are never stored)")
            }
            Work::Step(Step::Fused { kernel }) => match plan.kernels.get(*kernel as usize) {
                Some(kern) => {
                    let names: Vec<&str> =
                        kern.nodes.iter().map(|&n| tensor_name(&plan, n)).collect();
                    format!("fused kernel {kernel} ({})", names.join(" + "))
                }
                None => {
                    println!("  split {s} step {k}: fused kernel {kernel} (missing)");
                    continue;
                }
            },
        };
        if writes.contains(&id) {
            println!("  split {s} step {k}: written by {what}");
        } else if reads.contains(&id) {
            let written: Vec<&str> = writes.iter().map(|&w| tensor_name(&plan, w)).collect();
            let written = if written.is_empty() {
                "?".to_string()
            } else {
                written.join("', '")
            };
            println!("  split {s} step {k}: read by {what} writing '{written}'");
        }
    }
    Ok(ExitCode::SUCCESS)
}
