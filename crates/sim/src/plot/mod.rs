//! Line charts of simulation results, as standalone SVG documents drawn by plotters' SVG
//! backend. Two promises shape the code:
//!
//! - **Deterministic output**: every coordinate is a whole pixel and nothing depends on
//!   the iteration order of hashed containers, so the same chart gives the same bytes and
//!   plots can be diffed or checked into a results directory.
//! - **No panics on any input**: a point that cannot be drawn (NaN, infinite, absurdly
//!   large, or not positive on a log axis) is skipped, and a chart with nothing to draw still
//!   renders its axes with a "no data" note.
//!
//! `data` reduces a chart to axes and runs of drawable points, `ticks` places and labels
//! the ticks, `render` draws the result.

mod coord;
mod data;
mod render;
mod ticks;

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

impl Chart {
    /// Renders the chart as a standalone 800x480 SVG document.
    pub fn to_svg(&self) -> String {
        render::svg(self)
    }
}

#[cfg(test)]
mod tests {
    use super::data::clean_text;
    use super::render::PALETTE;
    use super::*;

    /// What starts the legend in the document: its translucent white background.
    const LEGEND: &str = "opacity=\"0.9\" fill=\"#FFFFFF\"";
    /// What draws the plot area's frame, after the axes and before the data.
    const FRAME: &str = "fill=\"none\" stroke=\"#444444\"";

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

    /// A colour as the SVG backend writes it.
    fn hex(index: usize) -> String {
        let c = PALETTE[index];
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    /// A text element holding exactly `text`, as the SVG backend writes it.
    fn text(text: &str) -> String {
        format!(">\n{text}\n</text>")
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
                    .filter(|n| !n.is_empty())
                    .map(|n| n.parse::<f64>().expect("not a number"))
                    .collect()
            })
            .collect()
    }

    /// Checks the structural promises: one root element, balanced tags, and only finite
    /// numbers in polylines, circles and positions.
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

    /// The part of the document that draws the data: after the plot area's frame (the
    /// axes and ticks before it are polylines too), before the legend.
    fn data(svg: &str) -> &str {
        let start = svg.find(FRAME).expect("no frame");
        svg[start..].split(LEGEND).next().unwrap()
    }

    /// Markers drawn for data, leaving out the legend's swatches.
    fn markers(svg: &str) -> usize {
        data(svg).matches("<circle").count()
    }

    /// The left edge of the legend box, in pixels.
    fn legend_x(svg: &str) -> f64 {
        let before = &svg[..svg.find(LEGEND).expect("no legend")];
        let rect = &before[before.rfind("<rect").unwrap()..];
        rect.split(" x=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap()
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
        assert_eq!(polyline_numbers(data(&svg)).len(), 2);
        // Markers for the 20-point series only.
        assert_eq!(markers(&svg), 20);
        // ...and so only its legend swatch carries a marker (the other's is transparent,
        // which the SVG backend leaves out).
        assert_eq!(svg.matches("<circle").count(), 21);
        assert!(svg.contains(&hex(0)) && svg.contains(&hex(1)));
        assert!(svg.contains(&text("a")) && svg.contains(&text("b")));
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
        assert_eq!(clean_text("nul\0bell\u{7}"), "nul\u{fffd}bell\u{fffd}");
        assert_eq!(clean_text("a\tb\nc"), "a b c");
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
        let lines = polyline_numbers(data(&svg));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), 4);
        assert_eq!(markers(&svg), 3);
        // The axis ignores them: 1..3 and 1..9 give small nice ranges.
        assert!(svg.contains(&text("10")) && !svg.contains("e30"));
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
        assert_eq!(polyline_numbers(data(&svg)).len(), 1);
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
            assert!(svg.contains(&text("no data")), "{svg}");
            assert!(!data(&svg).contains("<polyline") && markers(&svg) == 0);
            // The axes are still there: both ends of the default extents are labelled
            // (0 to 1 on a linear axis, 1 to 10 on a log one).
            let ends = if c.x_log { ["1", "10"] } else { ["0", "1"] };
            for end in ends {
                assert!(svg.contains(&text(end)), "{end} missing: {svg}");
            }
        }
    }

    #[test]
    fn single_points_and_flat_series_are_drawn() {
        let svg = chart(vec![series("one", vec![(5.0, 5.0)])]).to_svg();
        check_well_formed(&svg);
        assert_eq!(markers(&svg), 1);
        assert!(!data(&svg).contains("<polyline"));

        let flat = chart(vec![series(
            "flat",
            vec![(0.0, 2.0), (1.0, 2.0), (2.0, 2.0)],
        )]);
        let svg = flat.to_svg();
        check_well_formed(&svg);
        assert_eq!(polyline_numbers(data(&svg)).len(), 1);
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
        assert_eq!(data(&svg).matches("<polyline").count(), 40);
        // Series 0, 8, 16, 24 and 32 share the first colour.
        let lines_in_first_colour = data(&svg)
            .split("<polyline")
            .skip(1)
            .filter(|rest| {
                rest.starts_with(&format!(
                    " fill=\"none\" opacity=\"1\" stroke=\"{}\"",
                    hex(0)
                ))
            })
            .count();
        assert_eq!(lines_in_first_colour, 5);
        assert!(svg.contains(" more\n</text>"));
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
        let x = legend_x(&svg);
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
    }
}
