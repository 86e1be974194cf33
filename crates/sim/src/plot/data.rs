//! What a chart shows, before any pixel: which points are drawable, the axes that cover
//! them, each series as runs of consecutive drawable points in axis space, and the legend's
//! entries. Log axes are handled here (values become their log10), so the drawing sees two
//! linear axes.

use super::ticks::{Tick, format_tick, linear_ticks, log_ticks};
use super::{Chart, Series};

/// Beyond this magnitude, spans and tick arithmetic could overflow to infinity, so such
/// values are treated like infinities and skipped.
const MAX_MAGNITUDE: f64 = 1e300;
/// Smallest value kept on a log axis, the mirror image of [`MAX_MAGNITUDE`].
const MIN_LOG_VALUE: f64 = 1e-300;
/// Longest series name shown in the legend, in characters, so the legend cannot swallow
/// the plot.
const MAX_LEGEND_NAME: usize = 40;

/// A point in axis space: the value itself on a linear axis, its log10 on a log one.
pub(super) type Point = (f64, f64);

/// One series as runs of consecutive drawable points: a point that cannot be drawn leaves
/// a gap instead of a line bridging it.
pub(super) type Runs = Vec<Vec<Point>>;

/// A chart reduced to what is drawn.
#[derive(Debug)]
pub(super) struct PlotData {
    pub(super) x: Axis,
    pub(super) y: Axis,
    /// Each series' runs, by series.
    pub(super) lines: Vec<Runs>,
    /// Whether any point at all is drawable ("no data" otherwise).
    pub(super) has_data: bool,
}

impl PlotData {
    pub(super) fn of(chart: &Chart) -> Self {
        let mut x_range = Range::default();
        let mut y_range = Range::default();
        for &(x, y) in chart.series.iter().flat_map(|s| &s.points) {
            if drawable(x, chart.x_log) && drawable(y, chart.y_log) {
                x_range.add(x);
                y_range.add(y);
            }
        }
        let x = Axis::new(x_range.bounds, chart.x_log);
        let y = Axis::new(y_range.bounds, chart.y_log);
        let lines = chart.series.iter().map(|s| runs(s, &x, &y)).collect();
        Self {
            x,
            y,
            lines,
            has_data: x_range.bounds.is_some(),
        }
    }

    /// How many points of series `index` are drawn.
    pub(super) fn drawn(&self, index: usize) -> usize {
        self.lines
            .get(index)
            .map_or(0, |runs| runs.iter().map(Vec::len).sum())
    }
}

/// The runs of `series`, in axis space.
fn runs(series: &Series, x: &Axis, y: &Axis) -> Runs {
    let mut runs = Vec::new();
    let mut run = Vec::new();
    for &(px, py) in &series.points {
        if drawable(px, x.log) && drawable(py, y.log) {
            run.push((x.position(px), y.position(py)));
        } else if !run.is_empty() {
            runs.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// Whether a value can be placed on an axis of the given kind.
fn drawable(v: f64, log: bool) -> bool {
    v.is_finite() && v.abs() <= MAX_MAGNITUDE && (!log || v >= MIN_LOG_VALUE)
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
}

/// An axis: its extent in axis space and its ticks, the first and last of which are the
/// ends of the axis.
#[derive(Debug, Clone)]
pub(super) struct Axis {
    log: bool,
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) ticks: Vec<Tick>,
}

impl Axis {
    /// An axis covering `bounds` (drawable values only), or a default extent without data.
    fn new(bounds: Option<(f64, f64)>, log: bool) -> Axis {
        let ticks = if log {
            let (min, max) = bounds.unwrap_or((1.0, 10.0));
            log_ticks(min, max)
        } else {
            let (min, max) = bounds.unwrap_or((0.0, 1.0));
            linear_axis_ticks(min, max)
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

    /// Where a drawable value sits in axis space.
    fn position(&self, v: f64) -> f64 {
        if self.log { v.log10() } else { v }
    }

    /// The ticks' positions in axis space.
    pub(super) fn tick_positions(&self) -> Vec<f64> {
        self.ticks.iter().map(|t| t.pos).collect()
    }

    /// The label of the tick nearest `pos` (the drawing asks with the positions it was
    /// given, so nearest is exact).
    pub(super) fn label_at(&self, pos: f64) -> String {
        self.ticks
            .iter()
            .min_by(|a, b| (a.pos - pos).abs().total_cmp(&(b.pos - pos).abs()))
            .map_or_else(String::new, |t| t.label.clone())
    }
}

/// Linear ticks labelled with just enough decimals to tell them apart.
fn linear_axis_ticks(min: f64, max: f64) -> Vec<Tick> {
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
}

/// The legend's rows: (series index, name as shown) for every named series.
pub(super) fn legend_entries(chart: &Chart) -> Vec<(usize, String)> {
    chart
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.name.is_empty())
        .map(|(i, s)| (i, truncate(&clean_text(&s.name), MAX_LEGEND_NAME)))
        .collect()
}

/// `text` made safe as XML character data: characters XML 1.0 forbids (most control
/// characters) become U+FFFD and line breaks and tabs a space, so the document stays
/// well-formed. The SVG backend escapes markup (`<`, `&`, quotes) itself.
pub(super) fn clean_text(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => ' ',
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => '\u{fffd}',
            c => c,
        })
        .collect()
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
