//! Line charts of simulation results, written by hand as standalone SVG documents.
//!
//! SVG is plain text, so no plotting crate is needed. Two promises shape the code:
//!
//! - **Deterministic output**: every coordinate is printed with a fixed number of decimals
//!   and nothing depends on iteration order of hashed containers, so the same chart gives
//!   the same bytes and plots can be diffed or checked into a results directory.
//! - **No panics on any input**: a point that cannot be drawn (NaN, infinite, absurdly
//!   large, or not positive on a log axis) is skipped, and a chart with nothing to draw still
//!   renders its axes with a "no data" note.

use std::fmt::Write as _;

/// A line chart, rendered to a standalone SVG document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chart {
    /// Shown centred above the plot.
    pub title: String,
    /// Shown below the horizontal axis.
    pub x_label: String,
    /// Shown rotated beside the vertical axis.
    pub y_label: String,
    /// Use a base-10 logarithmic horizontal axis; points with `x <= 0` are skipped.
    pub x_log: bool,
    /// Use a base-10 logarithmic vertical axis; points with `y <= 0` are skipped.
    pub y_log: bool,
    /// The lines, drawn in order; colours cycle through a fixed palette of 8.
    pub series: Vec<Series>,
}

/// One line of a [`Chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its legend entry; an empty name leaves it out of the legend.
    pub name: String,
    /// `(x, y)` points joined in the given order (not sorted). A point that cannot be drawn
    /// breaks the line there.
    pub points: Vec<(f64, f64)>,
}

/// Size of the document in pixels.
const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 480.0;
/// Edges of the plot area that do not depend on label widths.
const PLOT_TOP: f64 = 48.0;
const PLOT_RIGHT: f64 = 770.0;
const PLOT_BOTTOM: f64 = 416.0;

/// Colour-blind-friendly, distinguishable on white; series `i` gets `PALETTE[i % 8]`.
const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Beyond this magnitude, spans and tick arithmetic could overflow to infinity, so such
/// values are treated like infinities and skipped.
const MAX_MAGNITUDE: f64 = 1e300;
/// Smallest value kept on a log axis, the mirror image of [`MAX_MAGNITUDE`].
const MIN_LOG_VALUE: f64 = 1e-300;
/// Series with more drawable points than this get no markers: they would merge into a blob.
const MARKER_LIMIT: usize = 50;
/// Longest series name shown in the legend, in characters, so the legend cannot swallow
/// the plot.
const MAX_LEGEND_NAME: usize = 40;
/// Rough width of one character as a fraction of the font size, for layout estimates.
const CHAR_WIDTH: f64 = 0.6;

impl Chart {
    /// Renders the chart as a standalone 800x480 SVG document.
    pub fn to_svg(&self) -> String {
        // Pixel-independent pass: which points are drawable, and the data range per axis.
        let mut x_range = Range::default();
        let mut y_range = Range::default();
        for series in &self.series {
            for &(x, y) in &series.points {
                if drawable(x, self.x_log) && drawable(y, self.y_log) {
                    x_range.add(x);
                    y_range.add(y);
                }
            }
        }
        let has_data = x_range.bounds().is_some();
        let x_axis = Axis::new(x_range.bounds(), self.x_log);
        let y_axis = Axis::new(y_range.bounds(), self.y_log);

        // The left margin grows with the widest y tick label so labels never hit the axis
        // title.
        let y_label_chars = y_axis
            .ticks
            .iter()
            .map(|t| t.label.chars().count())
            .max()
            .unwrap_or(1) as f64;
        let left = (30.0 + y_label_chars * 11.0 * CHAR_WIDTH + 10.0).clamp(60.0, 240.0);
        let area = Area {
            left,
            top: PLOT_TOP,
            right: PLOT_RIGHT,
            bottom: PLOT_BOTTOM,
        };

        let lines: Vec<Vec<Vec<(f64, f64)>>> = self
            .series
            .iter()
            .map(|s| self.segments(s, &x_axis, &y_axis, &area))
            .collect();

        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"Helvetica, Arial, sans-serif\" \
             font-size=\"12\">"
        );
        let _ = writeln!(
            out,
            "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>"
        );
        if !self.title.is_empty() {
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"30\" text-anchor=\"middle\" font-size=\"16\" \
                 font-weight=\"bold\" fill=\"#222222\">{}</text>",
                num(WIDTH / 2.0),
                escape(&self.title)
            );
        }
        write_axes(&mut out, &area, &x_axis, &y_axis);
        if !self.x_label.is_empty() {
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\" \
                 fill=\"#222222\">{}</text>",
                num(area.center_x()),
                num(area.bottom + 42.0),
                escape(&self.x_label)
            );
        }
        if !self.y_label.is_empty() {
            let (x, y) = (18.0, area.center_y());
            let _ = writeln!(
                out,
                "<text x=\"{x}\" y=\"{yy}\" transform=\"rotate(-90 {x} {yy})\" \
                 text-anchor=\"middle\" font-size=\"13\" fill=\"#222222\">{}</text>",
                escape(&self.y_label),
                x = num(x),
                yy = num(y),
            );
        }

        if has_data {
            write_series(&mut out, &area, &lines);
        } else {
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" \
                 fill=\"#888888\">no data</text>",
                num(area.center_x()),
                num(area.center_y())
            );
        }
        self.write_legend(&mut out, &area, &lines);
        out.push_str("</svg>\n");
        out
    }

    /// Pixel coordinates of a series, split into runs of consecutive drawable points so a
    /// skipped point leaves a visible gap instead of a line bridging it.
    fn segments(
        &self,
        series: &Series,
        x_axis: &Axis,
        y_axis: &Axis,
        area: &Area,
    ) -> Vec<Vec<(f64, f64)>> {
        let mut runs = Vec::new();
        let mut run = Vec::new();
        for &(x, y) in &series.points {
            let pixel = if drawable(x, self.x_log) && drawable(y, self.y_log) {
                let px = area.left + x_axis.fraction(x) * area.width();
                let py = area.bottom - y_axis.fraction(y) * area.height();
                // The axes cover the data so this always holds; the check keeps a NaN out of
                // the document should that ever be wrong.
                (px.is_finite() && py.is_finite()).then_some((px, py))
            } else {
                None
            };
            match pixel {
                Some(p) => run.push(p),
                None if !run.is_empty() => runs.push(std::mem::take(&mut run)),
                None => {}
            }
        }
        if !run.is_empty() {
            runs.push(run);
        }
        runs
    }

    /// The legend, in whichever corner of the plot area covers the least data.
    fn write_legend(&self, out: &mut String, area: &Area, lines: &[Vec<Vec<(f64, f64)>>]) {
        const ROW: f64 = 18.0;
        const FONT: f64 = 12.0;
        const INSET: f64 = 8.0;
        let mut entries: Vec<(usize, String)> = self
            .series
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.name.is_empty())
            .map(|(i, s)| (i, truncate(&s.name, MAX_LEGEND_NAME)))
            .collect();
        if entries.is_empty() {
            return;
        }
        // Too many entries for the plot height: show what fits and say how many are hidden.
        let max_rows = (((area.height() - 2.0 * INSET - 8.0) / ROW).floor() as usize).max(1);
        let mut more = None;
        if entries.len() > max_rows {
            let shown = max_rows - 1;
            more = Some(format!("+{} more", entries.len() - shown));
            entries.truncate(shown);
        }
        let rows = entries.len() + usize::from(more.is_some());
        let widest = entries
            .iter()
            .map(|(_, name)| name.chars().count())
            .chain(more.iter().map(|m| m.chars().count()))
            .max()
            .unwrap_or(0) as f64;
        let w = 10.0 + 22.0 + 6.0 + widest * FONT * CHAR_WIDTH + 10.0;
        let h = 8.0 + rows as f64 * ROW;

        let corners = [
            (area.right - INSET - w, area.top + INSET),
            (area.left + INSET, area.top + INSET),
            (area.right - INSET - w, area.bottom - INSET - h),
            (area.left + INSET, area.bottom - INSET - h),
        ];
        // First corner with the fewest data samples under it; ties keep the preference order
        // above, so the choice is deterministic.
        let (x0, y0) = corners
            .iter()
            .copied()
            .min_by_key(|&(cx, cy)| covered(lines, cx, cy, w, h))
            .unwrap_or(corners[0]);

        let _ = writeln!(
            out,
            "<g class=\"legend\">\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" \
             fill=\"#ffffff\" fill-opacity=\"0.9\" stroke=\"#bbbbbb\"/>",
            num(x0),
            num(y0),
            num(w),
            num(h)
        );
        for (row, (index, name)) in entries.iter().enumerate() {
            let colour = PALETTE[index % PALETTE.len()];
            let cy = y0 + 4.0 + ROW * (row as f64 + 0.5);
            let _ = writeln!(
                out,
                "<line x1=\"{}\" y1=\"{cy}\" x2=\"{}\" y2=\"{cy}\" stroke=\"{colour}\" \
                 stroke-width=\"2\"/>",
                num(x0 + 10.0),
                num(x0 + 32.0),
                cy = num(cy)
            );
            // The swatch shows a marker exactly when the series' points carry one.
            let drawn: usize = lines
                .get(*index)
                .map_or(0, |runs| runs.iter().map(Vec::len).sum());
            if (1..=MARKER_LIMIT).contains(&drawn) {
                let _ = writeln!(
                    out,
                    "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{colour}\"/>",
                    num(x0 + 21.0),
                    num(cy)
                );
            }
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" fill=\"#222222\">{}</text>",
                num(x0 + 38.0),
                num(cy + 4.0),
                escape(name)
            );
        }
        if let Some(more) = more {
            let cy = y0 + 4.0 + ROW * (entries.len() as f64 + 0.5);
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" fill=\"#666666\">{}</text>",
                num(x0 + 38.0),
                num(cy + 4.0),
                escape(&more)
            );
        }
        out.push_str("</g>\n");
    }
}

/// The plot area in pixels: the rectangle the data is drawn in.
#[derive(Debug, Clone, Copy)]
struct Area {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

impl Area {
    fn width(&self) -> f64 {
        self.right - self.left
    }
    fn height(&self) -> f64 {
        self.bottom - self.top
    }
    fn center_x(&self) -> f64 {
        (self.left + self.right) / 2.0
    }
    fn center_y(&self) -> f64 {
        (self.top + self.bottom) / 2.0
    }
}

/// Running minimum and maximum of the drawable values on one axis.
#[derive(Debug, Clone, Copy, Default)]
struct Range {
    bounds: Option<(f64, f64)>,
}

impl Range {
    fn add(&mut self, v: f64) {
        self.bounds = Some(match self.bounds {
            None => (v, v),
            Some((lo, hi)) => (lo.min(v), hi.max(v)),
        });
    }
    fn bounds(&self) -> Option<(f64, f64)> {
        self.bounds
    }
}

/// One labelled tick, at `pos` in axis space (the value itself, or its log10).
#[derive(Debug, Clone, PartialEq)]
struct Tick {
    pos: f64,
    label: String,
}

/// An axis: its extent in axis space and its ticks, the first and last of which are the
/// ends of the axis.
#[derive(Debug, Clone)]
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
    ticks: Vec<Tick>,
}

impl Axis {
    /// An axis covering `bounds` (drawable values only), or a default extent without data.
    fn new(bounds: Option<(f64, f64)>, log: bool) -> Axis {
        let ticks = if log {
            let (min, max) = bounds.unwrap_or((1.0, 10.0));
            log_ticks(min, max)
        } else {
            let (min, max) = bounds.unwrap_or((0.0, 1.0));
            let values = linear_ticks(min, max);
            let step = match values.as_slice() {
                [a, b, ..] => b - a,
                _ => 1.0,
            };
            values
                .into_iter()
                .map(|v| Tick {
                    pos: v,
                    label: format_tick(v, step),
                })
                .collect()
        };
        let lo = ticks.first().map_or(0.0, |t| t.pos);
        let hi = ticks.last().map_or(1.0, |t| t.pos);
        if lo.is_finite() && hi.is_finite() && lo < hi {
            Axis { log, lo, hi, ticks }
        } else {
            // Tick generation guarantees a proper extent; this is a last line of defence
            // against dividing by zero later.
            Axis {
                log,
                lo: 0.0,
                hi: 1.0,
                ticks: Vec::new(),
            }
        }
    }

    /// Where a drawable value sits along the axis, 0 at `lo` and 1 at `hi`.
    fn fraction(&self, v: f64) -> f64 {
        let pos = if self.log { v.log10() } else { v };
        (pos - self.lo) / (self.hi - self.lo)
    }
}

/// Whether a value can be placed on an axis of the given kind.
fn drawable(v: f64, log: bool) -> bool {
    v.is_finite() && v.abs() <= MAX_MAGNITUDE && (!log || v >= MIN_LOG_VALUE)
}

/// Grid lines, frame, tick marks and tick labels.
fn write_axes(out: &mut String, area: &Area, x_axis: &Axis, y_axis: &Axis) {
    let xs: Vec<(f64, &str)> = x_axis
        .ticks
        .iter()
        .map(|t| {
            let f = (t.pos - x_axis.lo) / (x_axis.hi - x_axis.lo);
            (area.left + f * area.width(), t.label.as_str())
        })
        .collect();
    let ys: Vec<(f64, &str)> = y_axis
        .ticks
        .iter()
        .map(|t| {
            let f = (t.pos - y_axis.lo) / (y_axis.hi - y_axis.lo);
            (area.bottom - f * area.height(), t.label.as_str())
        })
        .collect();

    out.push_str("<g class=\"grid\" stroke=\"#e5e5e5\" stroke-width=\"1\">\n");
    for &(x, _) in &xs {
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\"/>",
            num(area.top),
            num(area.bottom),
            x = num(x)
        );
    }
    for &(y, _) in &ys {
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\"/>",
            num(area.left),
            num(area.right),
            y = num(y)
        );
    }
    out.push_str("</g>\n");
    let _ = writeln!(
        out,
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444444\" \
         stroke-width=\"1\"/>",
        num(area.left),
        num(area.top),
        num(area.width()),
        num(area.height())
    );

    out.push_str("<g class=\"ticks\" stroke=\"#444444\" stroke-width=\"1\">\n");
    for &(x, _) in &xs {
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\"/>",
            num(area.bottom),
            num(area.bottom + 5.0),
            x = num(x)
        );
    }
    for &(y, _) in &ys {
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\"/>",
            num(area.left - 5.0),
            num(area.left),
            y = num(y)
        );
    }
    out.push_str("</g>\n");

    out.push_str("<g class=\"tick-labels\" font-size=\"11\" fill=\"#333333\">\n");
    for &(x, label) in &xs {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            num(x),
            num(area.bottom + 18.0),
            escape(label)
        );
    }
    for &(y, label) in &ys {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            num(area.left - 8.0),
            num(y + 4.0),
            escape(label)
        );
    }
    out.push_str("</g>\n");
}

/// Lines and markers, clipped to the plot area (with room for markers on its edges).
fn write_series(out: &mut String, area: &Area, lines: &[Vec<Vec<(f64, f64)>>]) {
    let pad = 5.0;
    let _ = writeln!(
        out,
        "<defs><clipPath id=\"plot-area\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\
         </clipPath></defs>",
        num(area.left - pad),
        num(area.top - pad),
        num(area.width() + 2.0 * pad),
        num(area.height() + 2.0 * pad)
    );
    out.push_str("<g class=\"series\" clip-path=\"url(#plot-area)\">\n");
    for (index, runs) in lines.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        for run in runs.iter().filter(|r| r.len() >= 2) {
            let mut points = String::new();
            for (i, &(x, y)) in run.iter().enumerate() {
                if i > 0 {
                    points.push(' ');
                }
                let _ = write!(points, "{},{}", num(x), num(y));
            }
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" \
                 stroke-linejoin=\"round\" stroke-linecap=\"round\" points=\"{points}\"/>"
            );
        }
        let count: usize = runs.iter().map(Vec::len).sum();
        for run in runs {
            // An isolated point has no line through it, so it needs a marker to be seen at
            // all, even in a dense series.
            if count <= MARKER_LIMIT || run.len() == 1 {
                for &(x, y) in run {
                    let _ = writeln!(
                        out,
                        "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{colour}\"/>",
                        num(x),
                        num(y)
                    );
                }
            }
        }
    }
    out.push_str("</g>\n");
}

/// How many samples of the drawn lines fall inside a box, sampling each segment at four
/// places so a long straight segment through the box counts too.
fn covered(lines: &[Vec<Vec<(f64, f64)>>], x: f64, y: f64, w: f64, h: f64) -> usize {
    let inside = |(px, py): (f64, f64)| px >= x && px <= x + w && py >= y && py <= y + h;
    let mut n = 0;
    for run in lines.iter().flatten() {
        if let Some(&last) = run.last() {
            n += usize::from(inside(last));
        }
        for pair in run.windows(2) {
            let ((x1, y1), (x2, y2)) = (pair[0], pair[1]);
            for t in [0.0, 0.25, 0.5, 0.75] {
                n += usize::from(inside((x1 + (x2 - x1) * t, y1 + (y2 - y1) * t)));
            }
        }
    }
    n
}

/// "Nice" tick values (multiples of 1, 2 or 5 x 10^k) covering `min..=max`: 5 to 8 of them,
/// first <= min and last >= max.
fn linear_ticks(min: f64, max: f64) -> Vec<f64> {
    let (mut lo, mut hi) = if min <= max { (min, max) } else { (max, min) };
    if !(lo.is_finite() && hi.is_finite()) {
        return vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0];
    }
    // A flat (or numerically flat) range gets a band around its value, so a constant series
    // is drawn mid-chart with readable ticks. Spans below 1e-200 are treated as flat too:
    // steps that small would underflow.
    let scale = lo.abs().max(hi.abs());
    if hi - lo <= (scale * 1e-9).max(1e-200) {
        let pad = if scale < 1e-200 { 1.0 } else { scale * 0.1 };
        let mid = lo / 2.0 + hi / 2.0;
        lo = mid - pad;
        hi = mid + pad;
    }
    let span = hi - lo;
    // Start from a step that certainly gives too many ticks and grow through 1, 2, 5 x 10^k
    // until at most 8 fit; a step >= span / 5 always does, so few candidates are tried.
    let start = (span / 10.0).log10().floor() as i32;
    for exp in start..start + 8 {
        for mantissa in [1.0, 2.0, 5.0] {
            let step = mantissa * pow10(exp);
            // The small slack stops rounding (0.3 / 0.1 = 2.9999999999999996) from adding a
            // tick beyond the data.
            let first = (lo / step + 1e-9).floor();
            let last = (hi / step - 1e-9).ceil();
            let count = last - first + 1.0;
            if count.is_finite() && count <= 8.0 {
                let (mut first, mut last) = (first as i64, last as i64);
                // Below 5 ticks the axis looks bare: extend it, away from zero when the
                // data is all negative so the axis does not gain a needless sign change.
                while last - first + 1 < 5 {
                    if last <= 0 && first < 0 {
                        first -= 1;
                    } else {
                        last += 1;
                    }
                }
                return (first..=last)
                    .map(|k| nice_value(k as f64 * mantissa, exp))
                    .collect();
            }
        }
    }
    vec![lo, hi]
}

/// `m x 10^exp`, dividing for negative exponents because 10^-k is not exact in binary while
/// the division rounds once, giving e.g. exactly the double nearest 0.3.
fn nice_value(m: f64, exp: i32) -> f64 {
    if exp < 0 {
        m / pow10(-exp)
    } else {
        m * pow10(exp)
    }
}

fn pow10(exp: i32) -> f64 {
    10f64.powi(exp)
}

/// Log-axis ticks covering `min..=max` (both positive): whole decades, thinned to every
/// 2nd, 3rd, 5th... decade when there are many, and filled in with 2 and 5 (and 3) when the
/// data spans only one or two decades.
fn log_ticks(min: f64, max: f64) -> Vec<Tick> {
    let (min, max) = if min <= max { (min, max) } else { (max, min) };
    if !(min > 0.0 && max.is_finite()) {
        return log_ticks(1.0, 10.0);
    }
    // Slack so exact powers of ten (whose log10 may come out a hair off) are not widened.
    let mut first = (min.log10() + 1e-9).floor() as i32;
    let mut last = (max.log10() - 1e-9).ceil() as i32;
    if first >= last {
        first -= 1;
        last += 1;
    }
    let tick = |exp: i32, mantissa: f64| Tick {
        pos: f64::from(exp) + mantissa.log10(),
        label: format_pow10(mantissa, exp),
    };
    let span = last - first;
    if span <= 2 {
        let mantissas: &[f64] = if span == 1 {
            &[1.0, 2.0, 3.0, 5.0]
        } else {
            &[1.0, 2.0, 5.0]
        };
        let mut ticks: Vec<Tick> = (first..last)
            .flat_map(|exp| mantissas.iter().map(move |&m| (exp, m)))
            .map(|(exp, m)| tick(exp, m))
            .collect();
        ticks.push(tick(last, 1.0));
        return ticks;
    }
    for stride in [1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000] {
        let lo = first.div_euclid(stride) * stride;
        let hi = -((-last).div_euclid(stride)) * stride;
        if (hi - lo) / stride < 8 {
            return (0..=(hi - lo) / stride)
                .map(|i| tick(lo + i * stride, 1.0))
                .collect();
        }
    }
    vec![tick(first, 1.0), tick(last, 1.0)]
}

/// The label of `mantissa x 10^exp` on a log axis; exponents are formatted directly so
/// extreme decades need no floating-point power that could overflow.
fn format_pow10(mantissa: f64, exp: i32) -> String {
    if (-4..15).contains(&exp) {
        let v = nice_value(mantissa, exp);
        format_tick(v, v)
    } else {
        format!("{}e{exp}", trim_decimals(&format!("{mantissa:.0}")))
    }
}

/// A compact tick label: SI suffixes (k, M, G, T) from 1000 up, plain decimals below, and
/// `1.5e-7` style for very small or very large magnitudes. `step` is the spacing between
/// ticks; labels get just enough decimals to tell neighbours apart, then trailing zeros go.
fn format_tick(v: f64, step: f64) -> String {
    let step = step.abs();
    // Multiples of the step that should be 0 can come out as 1e-17 after arithmetic.
    if !v.is_finite() || v == 0.0 || v.abs() < step * 1e-6 {
        return "0".to_string();
    }
    let a = v.abs();
    if !(1e-4..1e15).contains(&a) {
        let mut exp = (a.log10() + 1e-9).floor() as i32;
        let decimals = decimals_for(step / pow10(exp), 6);
        let mut mantissa = v / pow10(exp);
        let mut text = fixed(mantissa, decimals);
        // Rounding can carry into a new digit (9.9999 -> "10"); renormalise.
        if text.trim_start_matches('-').starts_with("10") {
            exp += 1;
            mantissa /= 10.0;
            text = fixed(mantissa, decimals);
        }
        return format!("{text}e{exp}");
    }
    for (div, suffix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if a >= div {
            return format!("{}{suffix}", fixed(v / div, decimals_for(step / div, 6)));
        }
    }
    fixed(v, decimals_for(step, 15))
}

/// Decimals needed to show multiples of `step`, at most `max`.
fn decimals_for(step: f64, max: i32) -> usize {
    if step > 0.0 && step.is_finite() {
        (-(step.log10() + 1e-9).floor()).clamp(0.0, f64::from(max)) as usize
    } else {
        max as usize
    }
}

/// `v` with `decimals` decimals, trailing zeros removed, and never "-0".
fn fixed(v: f64, decimals: usize) -> String {
    let text = format!("{v:.decimals$}");
    let text = trim_decimals(&text);
    if text == "-0" { "0".to_string() } else { text }
}

fn trim_decimals(text: &str) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text.to_string()
    }
}

/// A pixel coordinate or length with fixed precision, so output bytes are reproducible.
fn num(v: f64) -> String {
    fixed(v, 2)
}

/// `text` made safe as XML character data or attribute value. Characters XML 1.0 forbids
/// (most control characters) become U+FFFD so the document stays well-formed.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// At most `max` characters of `text`, with an ellipsis when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('\u{2026}');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_string(),
            points,
        }
    }

    fn chart(series: Vec<Series>) -> Chart {
        Chart {
            title: "t".to_string(),
            x_label: "x".to_string(),
            y_label: "y".to_string(),
            series,
            ..Chart::default()
        }
    }

    /// The numbers in every `points="..."` attribute of every polyline.
    fn polyline_numbers(svg: &str) -> Vec<Vec<f64>> {
        svg.split("<polyline")
            .skip(1)
            .map(|rest| {
                let start = rest.find("points=\"").expect("polyline without points") + 8;
                let end = start + rest[start..].find('"').unwrap();
                rest[start..end]
                    .split([' ', ','])
                    .map(|n| n.parse::<f64>().expect("not a number"))
                    .collect()
            })
            .collect()
    }

    /// Checks the structural promises: one root element, balanced tags we emit, and only
    /// finite numbers in polylines and circles.
    fn check_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches("</svg>").count(), 1);
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        for numbers in polyline_numbers(svg) {
            assert!(numbers.len() >= 4 && numbers.len() % 2 == 0);
            assert!(numbers.iter().all(|n| n.is_finite()));
        }
        for attr in [
            " cx=\"", " cy=\"", " x=\"", " y=\"", " x1=\"", " y1=\"", " x2=\"", " y2=\"",
        ] {
            for rest in svg.split(attr).skip(1) {
                let value = &rest[..rest.find('"').unwrap()];
                let n: f64 = value.parse().expect("coordinate is not a number");
                assert!(n.is_finite());
            }
        }
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    /// Markers drawn for data, leaving out the legend's swatches.
    fn markers(svg: &str) -> usize {
        let data = svg.split("class=\"legend\"").next().unwrap();
        data.matches("<circle").count()
    }

    fn labels(ticks: &[Tick]) -> Vec<&str> {
        ticks.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn linear_ticks_are_nice_and_cover_the_range() {
        assert_eq!(
            linear_ticks(0.0, 97.0),
            [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(linear_ticks(0.0, 1.0), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            linear_ticks(-3.0, 7.0),
            [-4.0, -2.0, 0.0, 2.0, 4.0, 6.0, 8.0]
        );
        assert_eq!(linear_ticks(0.3, 0.7), [0.3, 0.4, 0.5, 0.6, 0.7]);
        assert_eq!(
            linear_ticks(1000.0, 2_500_000.0),
            [0.0, 500e3, 1e6, 1.5e6, 2e6, 2.5e6]
        );
        // Too few ticks at the first step that fits gets extended to 5.
        assert_eq!(linear_ticks(1.9, 14.1), [0.0, 5.0, 10.0, 15.0, 20.0]);
        assert_eq!(linear_ticks(-14.1, -1.9), [-20.0, -15.0, -10.0, -5.0, 0.0]);
    }

    #[test]
    fn linear_ticks_hold_their_promises_over_many_ranges() {
        let mut lo = -1e7;
        while lo < 1e7 {
            for width in [1e-6, 0.013, 0.5, 1.0, 3.7, 12.2, 97.0, 1234.5, 9e6] {
                let hi = lo + width;
                let ticks = linear_ticks(lo, hi);
                assert!((5..=8).contains(&ticks.len()), "{lo}..{hi}: {ticks:?}");
                assert!(ticks[0] <= lo + width * 1e-6, "{lo}..{hi}: {ticks:?}");
                assert!(
                    *ticks.last().unwrap() >= hi - width * 1e-6,
                    "{lo}..{hi}: {ticks:?}"
                );
                let step = ticks[1] - ticks[0];
                let exp = step.log10().floor();
                let mantissa = step / 10f64.powf(exp);
                assert!(
                    [1.0, 2.0, 5.0, 10.0]
                        .iter()
                        .any(|m| (mantissa - m).abs() < 1e-6),
                    "{lo}..{hi}: step {step}"
                );
            }
            lo = lo * 0.77 + 3.3;
            if lo.abs() < 1.0 {
                lo += 1.37;
            }
            lo = if lo < 0.0 { lo * 0.9 } else { lo * 1.9 + 0.7 };
        }
    }

    #[test]
    fn flat_and_extreme_linear_ranges_still_give_ticks() {
        for (lo, hi) in [
            (0.0, 0.0),
            (5.0, 5.0),
            (-3.0, -3.0),
            (1e-310, 1e-310),
            (1e300, 1e300),
            (-1e300, 1e300),
            (1.0, 1.0 + 1e-12),
            (7.0, 3.0),
        ] {
            let ticks = linear_ticks(lo, hi);
            assert!(ticks.len() >= 2, "{lo}..{hi}: {ticks:?}");
            assert!(ticks.iter().all(|t| t.is_finite()));
            assert!(ticks[0] < *ticks.last().unwrap());
            assert!(ticks[0] <= lo.min(hi) && *ticks.last().unwrap() >= lo.max(hi));
        }
        assert_eq!(linear_ticks(0.0, 0.0), [-1.0, -0.5, 0.0, 0.5, 1.0]);
    }

    #[test]
    fn log_ticks_are_decades() {
        let ticks = log_ticks(3.0, 2e6);
        assert_eq!(
            labels(&ticks),
            ["1", "10", "100", "1k", "10k", "100k", "1M", "10M"]
        );
        let positions: Vec<f64> = ticks.iter().map(|t| t.pos).collect();
        assert_eq!(positions, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(
            labels(&log_ticks(0.002, 0.5)),
            ["0.001", "0.01", "0.1", "1"]
        );
        assert_eq!(labels(&log_ticks(1.0, 1000.0)), ["1", "10", "100", "1k"]);
        assert_eq!(
            labels(&log_ticks(1e-3, 1e12)),
            ["0.001", "1", "1k", "1M", "1G", "1T"]
        );
        assert_eq!(
            labels(&log_ticks(1e-300, 1e300)),
            ["1e-300", "1e-200", "1e-100", "1", "1e100", "1e200", "1e300"]
        );
    }

    #[test]
    fn narrow_log_ranges_get_intermediate_ticks() {
        assert_eq!(labels(&log_ticks(3.0, 9.0)), ["1", "2", "3", "5", "10"]);
        assert_eq!(
            labels(&log_ticks(20.0, 900.0)),
            ["10", "20", "50", "100", "200", "500", "1k"]
        );
        // A single exact decade is widened to one decade either side.
        assert_eq!(
            labels(&log_ticks(100.0, 100.0)),
            ["10", "20", "50", "100", "200", "500", "1k"]
        );
        assert_eq!(
            labels(&log_ticks(2e-5, 4e-5)),
            ["1e-5", "2e-5", "3e-5", "5e-5", "0.0001"]
        );
    }

    #[test]
    fn tick_labels_are_compact() {
        assert_eq!(format_tick(0.0, 20.0), "0");
        assert_eq!(format_tick(-0.0, 1.0), "0");
        assert_eq!(format_tick(1e-17, 0.1), "0");
        assert_eq!(format_tick(20.0, 20.0), "20");
        assert_eq!(format_tick(0.30000000000000004, 0.1), "0.3");
        assert_eq!(format_tick(0.25, 0.05), "0.25");
        assert_eq!(format_tick(1500.0, 500.0), "1.5k");
        assert_eq!(format_tick(-20000.0, 5000.0), "-20k");
        assert_eq!(format_tick(2.5e6, 5e5), "2.5M");
        assert_eq!(format_tick(3e9, 1e9), "3G");
        assert_eq!(format_tick(2e15, 2e15), "2e15");
        assert_eq!(format_tick(2.5e-7, 5e-8), "2.5e-7");
        assert_eq!(format_tick(999.0, 1.0), "999");
        assert_eq!(format_tick(0.001, 0.001), "0.001");
    }

    #[test]
    fn renders_a_well_formed_document() {
        let svg = chart(vec![
            series(
                "a",
                (0..20).map(|i| (f64::from(i), f64::from(i * i))).collect(),
            ),
            series("b", (0..200).map(|i| (f64::from(i) / 10.0, 3.0)).collect()),
        ])
        .to_svg();
        check_well_formed(&svg);
        assert_eq!(polyline_numbers(&svg).len(), 2);
        // Markers for the 20-point series only.
        assert_eq!(markers(&svg), 20);
        // ...and so only its legend swatch carries a marker.
        assert_eq!(svg.matches("<circle").count(), 21);
        assert!(svg.contains(PALETTE[0]) && svg.contains(PALETTE[1]));
        assert!(!svg.contains("no data"));
    }

    #[test]
    fn a_small_chart_renders_exactly() {
        // The whole document, so that any change to layout, number formatting or element
        // order shows up here and is reviewed. After an intended change, regenerate with
        // `SLUICE_BLESS=1 cargo test -p sluice-sim a_small_chart` and look at the file.
        let c = Chart {
            x_log: true,
            ..chart(vec![
                series("a", vec![(1.0, 1.0), (10.0, 3.0), (100.0, 2.0)]),
                series("b", vec![(2.0, 0.5), (50.0, 2.5)]),
            ])
        };
        let svg = c.to_svg();
        let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/data/golden/small-chart.svg");
        if std::env::var_os("SLUICE_BLESS").is_some() {
            std::fs::write(golden, &svg).unwrap();
        }
        assert_eq!(svg, std::fs::read_to_string(golden).unwrap());
    }

    #[test]
    fn text_is_escaped() {
        let c = Chart {
            title: "a<b & \"c\" > d".to_string(),
            x_label: "<x>".to_string(),
            y_label: "y&".to_string(),
            series: vec![series("</svg><script>", vec![(0.0, 1.0), (1.0, 2.0)])],
            ..Chart::default()
        };
        let svg = c.to_svg();
        check_well_formed(&svg);
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot; &gt; d"));
        assert!(svg.contains("&lt;x&gt;"));
        assert!(svg.contains("y&amp;"));
        assert!(svg.contains("&lt;/svg&gt;&lt;script&gt;"));
        assert!(!svg.contains("<script"));
        assert_eq!(escape("nul\0bell\u{7}"), "nul\u{fffd}bell\u{fffd}");
    }

    #[test]
    fn undrawable_points_are_skipped() {
        let bad = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e308, -1e308];
        let mut points = vec![(1.0, 1.0), (2.0, 4.0)];
        for &b in &bad {
            points.push((b, 1.0));
            points.push((1.0, b));
        }
        points.push((3.0, 9.0));
        let svg = chart(vec![series("s", points)]).to_svg();
        check_well_formed(&svg);
        // The bad points break the line: one polyline before them, an isolated marker after.
        let lines = polyline_numbers(&svg);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), 4);
        assert_eq!(markers(&svg), 3);
        // The axis ignores them: 1..3 and 1..9 give small nice ranges.
        assert!(svg.contains(">10</text>") && !svg.contains("e30"));
    }

    #[test]
    fn log_axes_skip_non_positive_values() {
        let c = Chart {
            x_log: true,
            y_log: true,
            ..chart(vec![series(
                "s",
                vec![
                    (0.0, 1.0),
                    (-1.0, 5.0),
                    (1.0, 0.0),
                    (10.0, 100.0),
                    (1000.0, 1e4),
                ],
            )])
        };
        let svg = c.to_svg();
        check_well_formed(&svg);
        assert_eq!(markers(&svg), 2);
        assert_eq!(polyline_numbers(&svg).len(), 1);
    }

    #[test]
    fn empty_and_undrawable_charts_say_no_data() {
        let only_bad = vec![series("s", vec![(f64::NAN, 1.0), (0.0, f64::INFINITY)])];
        let log_of_zero = Chart {
            y_log: true,
            ..chart(vec![series("z", vec![(1.0, 0.0), (2.0, -3.0)])])
        };
        for c in [
            Chart::default(),
            chart(Vec::new()),
            chart(vec![series("empty", Vec::new())]),
            chart(only_bad),
            log_of_zero,
            Chart {
                x_log: true,
                y_log: true,
                ..Chart::default()
            },
        ] {
            let svg = c.to_svg();
            check_well_formed(&svg);
            assert!(svg.contains(">no data</text>"), "{svg}");
            assert!(!svg.contains("<polyline") && markers(&svg) == 0);
            // The axes are still there.
            assert!(svg.contains("class=\"tick-labels\""));
        }
    }

    #[test]
    fn single_points_and_flat_series_are_drawn() {
        let svg = chart(vec![series("one", vec![(5.0, 5.0)])]).to_svg();
        check_well_formed(&svg);
        assert_eq!(markers(&svg), 1);
        assert!(!svg.contains("<polyline"));

        let flat = chart(vec![series(
            "flat",
            vec![(0.0, 2.0), (1.0, 2.0), (2.0, 2.0)],
        )]);
        let svg = flat.to_svg();
        check_well_formed(&svg);
        assert_eq!(polyline_numbers(&svg).len(), 1);
        for c in [
            chart(vec![series("zeros", vec![(0.0, 0.0), (0.0, 0.0)])]),
            chart(vec![series("tiny", vec![(1e-310, -1e-310), (0.0, 5e-324)])]),
            chart(vec![series("huge", vec![(-1e300, 1e300), (1e300, -1e300)])]),
        ] {
            check_well_formed(&c.to_svg());
        }
    }

    #[test]
    fn many_series_cycle_colours_and_fit_the_legend() {
        let many: Vec<Series> = (0..40)
            .map(|i| {
                series(
                    &format!("series {i}"),
                    vec![(0.0, f64::from(i)), (1.0, 1.0)],
                )
            })
            .collect();
        let svg = chart(many).to_svg();
        check_well_formed(&svg);
        assert_eq!(svg.matches("<polyline").count(), 40);
        // Series 0, 8, 16, 24 and 32 share the first colour.
        let lines_in_first_colour = svg
            .split("<polyline")
            .skip(1)
            .filter(|rest| rest.starts_with(&format!(" fill=\"none\" stroke=\"{}\"", PALETTE[0])))
            .count();
        assert_eq!(lines_in_first_colour, 5);
        assert!(svg.contains(" more</text>"));
        let long = "x".repeat(500);
        let svg = chart(vec![series(&long, vec![(0.0, 1.0)])]).to_svg();
        assert!(!svg.contains(&"x".repeat(41)));
    }

    #[test]
    fn legend_avoids_the_data() {
        // A line hugging the top right: the legend should go top left.
        let c = chart(vec![series(
            "rising",
            (0..100).map(|i| (f64::from(i), f64::from(i * i))).collect(),
        )]);
        let svg = c.to_svg();
        let legend = &svg[svg.find("class=\"legend\"").unwrap()..];
        let x: f64 = legend
            .split(" x=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(x < 200.0, "legend at x={x}");
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        prop_oneof![
            proptest::num::f64::ANY,
            -1e6..1e6f64,
            Just(0.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::MIN_POSITIVE),
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_input_renders_without_panicking(
            points in proptest::collection::vec((any_value(), any_value()), 0..40),
            x_log: bool,
            y_log: bool,
            name in ".{0,60}",
        ) {
            let c = Chart {
                x_log,
                y_log,
                title: name.clone(),
                ..chart(vec![series(&name, points.clone()), series("copy", points)])
            };
            let svg = c.to_svg();
            check_well_formed(&svg);
        }

        #[test]
        fn linear_ticks_cover_any_finite_range(a in -1e12..1e12f64, b in -1e12..1e12f64) {
            let ticks = linear_ticks(a, b);
            proptest::prop_assert!((5..=8).contains(&ticks.len()), "{a}..{b}: {ticks:?}");
            proptest::prop_assert!(ticks[0] <= a.min(b) + (a - b).abs() * 1e-8);
            proptest::prop_assert!(*ticks.last().unwrap() >= a.max(b) - (a - b).abs() * 1e-8);
        }
    }
}
