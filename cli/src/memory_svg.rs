//! Draws a [`Timeline`] as SVG: one panel per compute arena, x = global step,
//! y = byte offset, one rectangle per tensor over the steps it is alive,
//! the arena size and recorded lower bound as horizontal lines, the peak step
//! as a vertical one, and the other arenas as a line of text.
//!
//! Invariant: the output is a pure function of the timeline (fixed-precision
//! numbers, tensors in tensor order), so the same plan draws the same bytes.

use crate::memory_timeline::{ArenaTimeline, Kind, Timeline};
use crate::svg::{Svg, num, ticks};

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const HEADER: f64 = 78.0;
const PANEL: f64 = 300.0;
const PANEL_GAP: f64 = 80.0;
const FOOTER: f64 = 10.0;
const LINE: f64 = 18.0;
const MIB: f64 = (1u64 << 20) as f64;

/// The fill colour of a kind (colour-blind-friendly Tableau hues).
fn colour(k: Kind) -> &'static str {
    match k {
        Kind::Intermediate => "#4e79a7",
        Kind::Output => "#e15759",
        Kind::Copy => "#f28e2b",
        Kind::Other => "#9c755f",
    }
}

/// Megabytes with enough decimals to tell small arenas apart.
pub fn mib(bytes: u64) -> String {
    let m = bytes as f64 / MIB;
    if m >= 10.0 {
        format!("{m:.1} MiB")
    } else if m >= 0.1 {
        format!("{m:.2} MiB")
    } else {
        format!("{m:.4} MiB")
    }
}

/// Decimals needed to print multiples of `step` exactly enough.
fn decimals(step: f64) -> usize {
    if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    }
}

/// The SVG document for `tl`, titled `title`.
pub fn render(tl: &Timeline, title: &str) -> String {
    let panels = tl.compute.len().max(1) as f64;
    let height =
        HEADER + panels * (PANEL + PANEL_GAP) + LINE * other_arena_lines(tl).len() as f64 + FOOTER;
    let mut svg = Svg::new(WIDTH, height);
    svg.text(LEFT, 22.0, r#"font-size="15" font-weight="bold""#, title);
    let mut kinds: Vec<Kind> = tl
        .compute
        .iter()
        .flat_map(|a| a.bars.iter().map(|b| b.kind))
        .collect();
    kinds.sort();
    kinds.dedup();
    legend(&mut svg, 44.0, &kinds);
    if tl.compute.is_empty() {
        svg.text(
            LEFT,
            HEADER + 40.0,
            "",
            "this plan has no compute arena (nothing is reused over time)",
        );
    }
    for (i, a) in tl.compute.iter().enumerate() {
        let top = HEADER + i as f64 * (PANEL + PANEL_GAP) + 20.0;
        panel(&mut svg, tl, a, top);
    }
    let lines = other_arena_lines(tl);
    for (i, line) in lines.iter().enumerate() {
        let y = height - FOOTER - LINE * (lines.len() - i) as f64 + 14.0;
        // SVG collapses leading spaces, so indent the device lines by position.
        let indent = if i == 0 { 0.0 } else { 12.0 };
        svg.text(LEFT + indent, y, r##"fill="#333""##, line);
    }
    svg.finish(title)
}

/// The resident arenas, one line per device (they are alive the whole run).
fn other_arena_lines(tl: &Timeline) -> Vec<String> {
    let mut by_device: Vec<(&str, Vec<String>)> = Vec::new();
    for o in &tl.others {
        let item = format!("{} {} ({} tensors)", o.usage, mib(o.size), o.tensors);
        match by_device.iter_mut().find(|(d, _)| *d == o.device_name) {
            Some((_, items)) => items.push(item),
            None => by_device.push((&o.device_name, vec![item])),
        }
    }
    if by_device.is_empty() {
        return vec!["other arenas: none".to_string()];
    }
    let mut lines = vec!["other arenas (alive the whole run):".to_string()];
    lines.extend(
        by_device
            .into_iter()
            .map(|(d, items)| format!("{d}: {}", items.join(", "))),
    );
    lines
}

/// The legend: the kinds drawn, then the three kinds of line.
fn legend(svg: &mut Svg, y: f64, kinds: &[Kind]) {
    let mut x = LEFT;
    for &k in kinds {
        svg.rect(
            x,
            y - 10.0,
            12.0,
            12.0,
            &format!(r#"fill="{}""#, colour(k)),
            None,
        );
        svg.text(x + 16.0, y, "", k.label());
        x += 30.0 + 7.0 * k.label().len() as f64;
    }
    let lines = [
        ("arena size", r##"stroke="#222" stroke-width="1.5""##),
        (
            "lower bound (recorded)",
            r##"stroke="#59a14f" stroke-width="1.5" stroke-dasharray="6 3""##,
        ),
        (
            "peak step",
            r##"stroke="#b00" stroke-width="1.5" stroke-dasharray="2 2""##,
        ),
    ];
    for (label, style) in lines {
        svg.line(x, y - 4.0, x + 22.0, y - 4.0, style);
        svg.text(x + 26.0, y, "", label);
        x += 40.0 + 7.0 * label.len() as f64;
    }
}

fn panel(svg: &mut Svg, tl: &Timeline, a: &ArenaTimeline, top: f64) {
    let pw = WIDTH - LEFT - RIGHT;
    let n_steps = tl.steps.len().max(1);
    let peak_bytes = a.peak.map_or(0, |p| p.1);
    let ymax_bytes = a
        .size
        .max(a.lower_bound.unwrap_or(0))
        .max(peak_bytes)
        .max(1) as f64
        * 1.08;
    let x = |g: usize| LEFT + g as f64 * pw / n_steps as f64;
    let y = |b: f64| top + PANEL - b / ymax_bytes * PANEL;
    svg.raw(&format!(r#"<g class="arena" id="arena-{}">"#, a.arena));
    svg.text(
        LEFT,
        top - 8.0,
        r#"font-weight="bold""#,
        &format!(
            "{} compute arena (arena {}): {} tensors over {} steps",
            a.device_name,
            a.arena,
            a.bars.len(),
            tl.steps.len()
        ),
    );
    svg.rect(
        LEFT,
        top,
        pw,
        PANEL,
        r##"fill="#f7f7f7" stroke="#999""##,
        None,
    );
    for b in &a.bars {
        let h = (b.bytes as f64 / ymax_bytes * PANEL).max(0.6);
        let tip = format!(
            "{}: {} bytes ({}), steps {}..={}, {}",
            b.name,
            b.bytes,
            mib(b.bytes),
            b.first,
            b.last,
            b.kind.label()
        );
        svg.rect(
            x(b.first),
            y((b.offset + b.bytes) as f64),
            x(b.last + 1) - x(b.first),
            h,
            &format!(
                r#"class="tensor" fill="{}" fill-opacity="0.85" stroke="white" stroke-width="0.3""#,
                colour(b.kind)
            ),
            Some(&tip),
        );
    }
    // Split boundaries: where the device changes (each labelled with
    // its device), over the tensors so they stay readable.
    for (start, dev) in &tl.split_starts {
        svg.line(x(*start), top, x(*start), top + PANEL, r##"stroke="#bbb""##);
        svg.text(
            x(*start) + 2.0,
            top + 12.0,
            r##"font-size="10" fill="#777""##,
            dev,
        );
    }
    let right = LEFT + pw;
    let ys = y(a.size as f64);
    svg.line(LEFT, ys, right, ys, r##"stroke="#222" stroke-width="1.5""##);
    svg.text(right + 6.0, ys + 4.0, "", &format!("arena {}", mib(a.size)));
    if let Some(lb) = a.lower_bound {
        let yl = y(lb as f64);
        svg.line(
            LEFT,
            yl,
            right,
            yl,
            r##"class="lower-bound" stroke="#59a14f" stroke-width="1.5" stroke-dasharray="6 3""##,
        );
        // Keep the two labels apart when the lines nearly coincide.
        let ly = if (yl - ys).abs() < 14.0 {
            ys + 18.0
        } else {
            yl + 4.0
        };
        svg.text(
            right + 6.0,
            ly,
            r##"fill="#59a14f""##,
            &format!("bound {}", mib(lb)),
        );
    }
    if let Some((g, bytes)) = a.peak {
        let xp = (x(g) + x(g + 1)) / 2.0;
        svg.line(
            xp,
            top,
            xp,
            top + PANEL,
            r##"class="peak" stroke="#b00" stroke-width="1.5" stroke-dasharray="2 2""##,
        );
        svg.circle(xp, y(bytes as f64), 3.5, r##"fill="#b00""##);
        // In the panel's header row, right-aligned: never over the drawing.
        svg.text(
            LEFT + pw,
            top - 8.0,
            r##"fill="#b00" text-anchor="end""##,
            &format!("peak: step {g}, {} live", mib(bytes)),
        );
    }
    axes(svg, a, top, pw, n_steps, ymax_bytes);
    svg.raw("</g>");
}

fn axes(svg: &mut Svg, a: &ArenaTimeline, top: f64, pw: f64, n_steps: usize, ymax_bytes: f64) {
    let bottom = top + PANEL;
    let (_, xt) = ticks(n_steps as f64, 10);
    for t in xt {
        let xx = LEFT + t / n_steps as f64 * pw;
        svg.line(xx, bottom, xx, bottom + 4.0, r##"stroke="#555""##);
        svg.text(
            xx,
            bottom + 16.0,
            r#"text-anchor="middle" font-size="10""#,
            &format!("{t:.0}"),
        );
    }
    svg.text(
        LEFT + pw / 2.0,
        bottom + 34.0,
        r#"text-anchor="middle""#,
        "global step (each split's copies, then its steps)",
    );
    let (step, yt) = ticks(ymax_bytes / MIB, 6);
    let d = decimals(step);
    for t in yt {
        let yy = bottom - t * MIB / ymax_bytes * PANEL;
        svg.line(LEFT - 4.0, yy, LEFT, yy, r##"stroke="#555""##);
        svg.text(
            LEFT - 6.0,
            yy + 3.0,
            r#"text-anchor="end" font-size="10""#,
            &format!("{t:.d$}"),
        );
    }
    let cy = top + PANEL / 2.0;
    svg.text(
        18.0,
        cy,
        &format!(
            r#"text-anchor="middle" transform="rotate(-90 18 {})""#,
            num(cy)
        ),
        &format!("offset in the {} arena (MiB)", a.device_name),
    );
}
