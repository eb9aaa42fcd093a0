//! A minimal hand-written SVG writer: escaped text, fixed-precision numbers.
//!
//! Invariant: the same calls give the same bytes (numbers are printed with a
//! fixed number of decimals, never with `{}` of an f64), so drawings are
//! deterministic and diff well.

use std::fmt::Write as _;

/// Escapes `s` for use in SVG text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate with two decimals (`-0.00` printed as `0.00`).
pub fn num(v: f64) -> String {
    let s = format!("{v:.2}");
    if s == "-0.00" { "0.00".to_string() } else { s }
}

/// An SVG document being written, element by element.
pub struct Svg {
    body: String,
    width: f64,
    height: f64,
}

impl Svg {
    /// An empty drawing of `width` x `height` user units.
    pub fn new(width: f64, height: f64) -> Svg {
        Svg {
            body: String::new(),
            width,
            height,
        }
    }

    /// A line from (x1, y1) to (x2, y2) with extra attributes `attrs`.
    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, attrs: &str) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {attrs}/>"#,
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    /// A rectangle with extra attributes and an optional `<title>` tooltip.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, attrs: &str, title: Option<&str>) {
        let head = format!(
            r#"<rect x="{}" y="{}" width="{}" height="{}" {attrs}"#,
            num(x),
            num(y),
            num(w.max(0.0)),
            num(h.max(0.0))
        );
        match title {
            Some(t) => {
                let _ = writeln!(self.body, "{head}><title>{}</title></rect>", escape(t));
            }
            None => {
                let _ = writeln!(self.body, "{head}/>");
            }
        }
    }

    /// A circle of radius `r` at (cx, cy).
    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, attrs: &str) {
        let _ = writeln!(
            self.body,
            r#"<circle cx="{}" cy="{}" r="{}" {attrs}/>"#,
            num(cx),
            num(cy),
            num(r)
        );
    }

    /// Text (escaped) anchored at (x, y).
    pub fn text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{}" y="{}" {attrs}>{}</text>"#,
            num(x),
            num(y),
            escape(text)
        );
    }

    /// Raw markup (the caller keeps it well formed), e.g. `<g>` wrappers.
    pub fn raw(&mut self, markup: &str) {
        self.body.push_str(markup);
        self.body.push('\n');
    }

    /// The finished document.
    pub fn finish(self, title: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <title>{t}</title>\n\
             <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n{body}</svg>\n",
            w = num(self.width),
            h = num(self.height),
            t = escape(title),
            body = self.body
        )
    }
}

/// Tick positions for an axis from 0 to `max`: a 1-2-5 step giving at most
/// `max_ticks` intervals. Returns (step, ticks).
pub fn ticks(max: f64, max_ticks: usize) -> (f64, Vec<f64>) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, vec![0.0]);
    }
    let raw = max / max_ticks.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    // The epsilon keeps 0.3 / 0.1 = 2.999... from dropping the last tick.
    let n = (max / step + 1e-9).floor() as usize;
    (step, (0..=n).map(|i| i as f64 * step).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_prints_fixed_numbers() {
        assert_eq!(escape("a<b & 'c'>"), "a&lt;b &amp; &apos;c&apos;&gt;");
        assert_eq!(num(-0.001), "0.00");
        assert_eq!(num(1.005e3), "1005.00");
    }

    #[test]
    fn ticks_use_a_1_2_5_step() {
        let (step, t) = ticks(97.0, 10);
        assert_eq!(step, 10.0);
        assert_eq!(t.len(), 10);
        let (step, t) = ticks(0.3, 5);
        assert!((step - 0.1).abs() < 1e-12, "{step}");
        assert_eq!(t.len(), 4);
        assert_eq!(ticks(0.0, 5).1, vec![0.0]);
    }
}
