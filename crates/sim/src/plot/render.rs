//! The drawing: a [`PlotData`] laid out and written as SVG by plotters' SVG backend
//! (axes, grid, tick labels, axis titles, lines, markers, legend).
//!
//! Without a font feature plotters sizes text by a fixed estimate per character instead
//! of reading a font, which is all an SVG needs: the viewer lays the text out itself.

use plotters::coord::Shift;
use plotters::coord::cartesian::Cartesian2d;
use plotters::prelude::{
    ChartBuilder, ChartContext, Circle, Color, DrawingArea, DrawingAreaErrorKind, EmptyElement,
    FontStyle, IntoDrawingArea, IntoFont, MultiLineText, PathElement, RGBColor, Rectangle,
    SVGBackend, SeriesLabelPosition, Text, TextStyle, WHITE,
};
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::Chart;
use super::coord::AxisCoord;
use super::data::{Axis, PlotData, Point, clean_text, legend_entries};

/// Size of the document in pixels.
const WIDTH: u32 = 800;
const HEIGHT: u32 = 480;

/// Colour-blind-friendly, distinguishable on white; series `i` gets `PALETTE[i % 8]`.
pub(super) const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];
const GRID: RGBColor = RGBColor(0xe5, 0xe5, 0xe5);
const FRAME: RGBColor = RGBColor(0x44, 0x44, 0x44);
const NOTE: RGBColor = RGBColor(0x88, 0x88, 0x88);
const LEGEND_BORDER: RGBColor = RGBColor(0xbb, 0xbb, 0xbb);

/// Font sizes as plotters takes them: it writes `size / 1.24` pixels into the SVG, so
/// these come out at about 16, 13, 11 and 12 pixels.
const FONT: &str = "sans-serif";
const TITLE_SIZE: f64 = 20.0;
const AXIS_TITLE_SIZE: f64 = 16.0;
const TICK_LABEL_SIZE: f64 = 14.0;
const LEGEND_SIZE: f64 = 15.0;

/// Series with more drawable points than this get no markers: they would merge into a blob.
const MARKER_LIMIT: usize = 50;
const MARKER_RADIUS: u32 = 3;
/// Room for a legend row's swatch, and the legend's inner margin, in pixels.
const SWATCH: u32 = 30;
const LEGEND_MARGIN: u32 = 8;
/// plotters keeps a legend this far inside the plot area's edges, in pixels.
const LEGEND_INSET: i32 = 5;

type Coords = Cartesian2d<AxisCoord, AxisCoord>;
type Context<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Coords>;
type Root<'b> = DrawingArea<SVGBackend<'b>, Shift>;
type DrawResult<T> = Result<T, DrawingAreaErrorKind<std::io::Error>>;

/// The chart as a standalone SVG document.
pub(super) fn svg(chart: &Chart) -> String {
    let data = PlotData::of(chart);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        // Writing into a String cannot fail, and neither can the text estimate (no font is
        // read); an error here is a bug in this module.
        draw(&root, chart, &data)
            .and_then(|()| root.present())
            .expect("drawing an SVG chart into a String");
    }
    out
}

fn draw(root: &Root<'_>, chart: &Chart, data: &PlotData) -> DrawResult<()> {
    root.fill(&WHITE)?;
    let mut ctx = axes(root, chart, data)?;
    if data.has_data {
        lines(&mut ctx, data)?;
    } else {
        let (xs, ys) = ctx.plotting_area().get_pixel_range();
        let centre = ((xs.start + xs.end) / 2, (ys.start + ys.end) / 2);
        let style = TextStyle::from((FONT, 17.0).into_font())
            .color(&NOTE)
            .pos(Pos::new(HPos::Center, VPos::Center));
        root.draw(&Text::new("no data", centre, style))?;
    }
    legend(&mut ctx, chart, data)
}

/// The title, the plot area with its frame, grid, ticks, tick labels and axis titles.
fn axes<'a, 'b>(root: &'a Root<'b>, chart: &Chart, data: &PlotData) -> DrawResult<Context<'a, 'b>> {
    let title = clean_text(&chart.title);
    let mut builder = ChartBuilder::on(root);
    builder
        .margin_top(if title.is_empty() { 30 } else { 8 })
        .margin_right(30)
        .x_label_area_size(56)
        .y_label_area_size(y_label_area(&data.y));
    if !title.is_empty() {
        builder.caption(
            &title,
            (FONT, TITLE_SIZE).into_font().style(FontStyle::Bold),
        );
    }
    let (x, y) = (&data.x, &data.y);
    let mut ctx = builder.build_cartesian_2d(AxisCoord::new(x), AxisCoord::new(y))?;
    let mut mesh = ctx.configure_mesh();
    mesh.bold_line_style(GRID)
        .light_line_style(WHITE.mix(0.0))
        .axis_style(FRAME)
        .label_style((FONT, TICK_LABEL_SIZE))
        .axis_desc_style((FONT, AXIS_TITLE_SIZE));
    let (x_title, y_title) = (clean_text(&chart.x_label), clean_text(&chart.y_label));
    if !x_title.is_empty() {
        mesh.x_desc(x_title);
    }
    if !y_title.is_empty() {
        mesh.y_desc(y_title);
    }
    mesh.draw()?;
    // The mesh draws the left and bottom edges; the frame closes the plot area.
    ctx.plotting_area()
        .draw(&Rectangle::new([(x.lo, y.lo), (x.hi, y.hi)], FRAME))?;
    Ok(ctx)
}

/// The width of the area left of the plot: the widest tick label, the tick marks and the
/// rotated axis title, so labels never hit the title.
fn y_label_area(y: &Axis) -> u32 {
    let font = (FONT, TICK_LABEL_SIZE).into_font();
    let widest = y
        .ticks
        .iter()
        .filter_map(|t| font.box_size(&t.label).ok())
        .map(|(w, _)| w)
        .max()
        .unwrap_or(0);
    (widest + 48).clamp(60, 240)
}

/// Each series' runs as lines, and its points as markers when it has few: an isolated
/// point has no line through it, so it gets a marker even in a dense series.
fn lines<'a, 'b: 'a>(ctx: &mut Context<'a, 'b>, data: &PlotData) -> DrawResult<()> {
    for (index, runs) in data.lines.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        for run in runs.iter().filter(|r| r.len() >= 2) {
            let line = PathElement::new(run.clone(), colour.stroke_width(2));
            ctx.draw_series(std::iter::once(line))?;
        }
        let marked = data.drawn(index) <= MARKER_LIMIT;
        for run in runs.iter().filter(|r| marked || r.len() == 1) {
            let markers = run
                .iter()
                .map(|&p| Circle::new(p, MARKER_RADIUS, colour.filled()));
            ctx.draw_series(markers)?;
        }
    }
    Ok(())
}

/// The legend, in whichever corner of the plot area covers the least data. Too many
/// entries for the plot's height: those that fit, and a row saying how many are hidden.
fn legend<'a, 'b: 'a>(ctx: &mut Context<'a, 'b>, chart: &Chart, data: &PlotData) -> DrawResult<()> {
    let mut entries = legend_entries(chart);
    if entries.is_empty() {
        return Ok(());
    }
    let (xs, ys) = ctx.plotting_area().get_pixel_range();
    let room = ys.end - ys.start - 2 * LEGEND_INSET;
    let total = entries.len();
    let mut more = None;
    let mut size = legend_size(&entries, None);
    while size.1 > room && entries.len() > 1 {
        entries.pop();
        more = Some(format!("+{} more", total - entries.len()));
        size = legend_size(&entries, more.as_deref());
    }
    for (index, name) in &entries {
        let colour = PALETTE[index % PALETTE.len()];
        let anno = ctx.draw_series(std::iter::empty::<EmptyElement<Point, SVGBackend<'_>>>())?;
        anno.label(name.as_str());
        // The swatch shows a marker exactly when the series' points carry one.
        let marker = if (1..=MARKER_LIMIT).contains(&data.drawn(*index)) {
            colour.filled()
        } else {
            WHITE.mix(0.0).filled()
        };
        anno.legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + Rectangle::new([(0, -1), (22, 1)], colour.filled())
                + Circle::new((11, 0), MARKER_RADIUS, marker)
        });
    }
    if let Some(more) = more {
        let anno = ctx.draw_series(std::iter::empty::<EmptyElement<Point, SVGBackend<'_>>>())?;
        anno.label(more).legend(EmptyElement::at);
    }
    let origin = (xs.start, ys.start);
    let area = (xs.end - xs.start, ys.end - ys.start);
    let corner = quietest_corner(ctx, data, origin, area, size);
    ctx.configure_series_labels()
        .position(corner)
        .background_style(WHITE.mix(0.9))
        .border_style(LEGEND_BORDER)
        .label_font((FONT, LEGEND_SIZE))
        .legend_area_size(SWATCH)
        .margin(LEGEND_MARGIN)
        .draw()
}

/// The legend's size in pixels, as plotters will lay it out.
fn legend_size(entries: &[(usize, String)], more: Option<&str>) -> (i32, i32) {
    let style = TextStyle::from((FONT, LEGEND_SIZE).into_font());
    let mut text = MultiLineText::<_, &str>::new((0, 0), &style);
    for (_, name) in entries {
        text.push_line(name.as_str());
    }
    if let Some(more) = more {
        text.push_line(more);
    }
    let (w, h) = text.estimate_dimension().unwrap_or((0, 0));
    let margin = LEGEND_MARGIN as i32;
    (w + SWATCH as i32 + 2 * margin, h + 2 * margin)
}

/// The corner (upper right, upper left, lower right, lower left: the first of the least
/// covered) where a legend of `size` hides the fewest samples of the drawn lines.
fn quietest_corner(
    ctx: &Context<'_, '_>,
    data: &PlotData,
    origin: (i32, i32),
    (area_w, area_h): (i32, i32),
    (w, h): (i32, i32),
) -> SeriesLabelPosition {
    let (right, bottom) = (area_w - w - LEGEND_INSET, area_h - h - LEGEND_INSET);
    let corners = [
        (SeriesLabelPosition::UpperRight, (right, LEGEND_INSET)),
        (SeriesLabelPosition::UpperLeft, (LEGEND_INSET, LEGEND_INSET)),
        (SeriesLabelPosition::LowerRight, (right, bottom)),
        (SeriesLabelPosition::LowerLeft, (LEGEND_INSET, bottom)),
    ];
    let pixels: Vec<Vec<(f64, f64)>> = data
        .lines
        .iter()
        .flatten()
        .map(|run| {
            run.iter()
                .map(|p| {
                    let (px, py) = ctx.backend_coord(p);
                    (f64::from(px - origin.0), f64::from(py - origin.1))
                })
                .collect()
        })
        .collect();
    corners
        .into_iter()
        .min_by_key(|&(_, (x, y))| covered(&pixels, x, y, w, h))
        .map_or(SeriesLabelPosition::UpperRight, |(corner, _)| corner)
}

/// How many samples of the drawn runs fall inside a box, sampling each segment at four
/// places so a long straight segment through the box counts too.
fn covered(runs: &[Vec<(f64, f64)>], x: i32, y: i32, w: i32, h: i32) -> usize {
    let (x, y, w, h) = (f64::from(x), f64::from(y), f64::from(w), f64::from(h));
    let inside = |(px, py): (f64, f64)| px >= x && px <= x + w && py >= y && py <= y + h;
    let mut n = 0;
    for run in runs {
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
