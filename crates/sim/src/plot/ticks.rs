//! Where the ticks of an axis go and what they say: "nice" steps of 1, 2 or 5 x 10^k on a
//! linear axis, decades (thinned or filled in) on a log axis, and compact labels.

/// One labelled tick, at `pos` in axis space (the value itself, or its log10).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tick {
    pub(super) pos: f64,
    pub(super) label: String,
}

/// "Nice" tick values (multiples of 1, 2 or 5 x 10^k) covering `min..=max`: 5 to 8 of them,
/// first <= min and last >= max.
pub(super) fn linear_ticks(min: f64, max: f64) -> Vec<f64> {
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
pub(super) fn log_ticks(min: f64, max: f64) -> Vec<Tick> {
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
pub(super) fn format_tick(v: f64, step: f64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    proptest::proptest! {
        #[test]
        fn linear_ticks_cover_any_finite_range(a in -1e12..1e12f64, b in -1e12..1e12f64) {
            let ticks = linear_ticks(a, b);
            proptest::prop_assert!((5..=8).contains(&ticks.len()), "{a}..{b}: {ticks:?}");
            proptest::prop_assert!(ticks[0] <= a.min(b) + (a - b).abs() * 1e-8);
            proptest::prop_assert!(*ticks.last().unwrap() >= a.max(b) - (a - b).abs() * 1e-8);
        }
    }
}
