//! An [`Axis`] as a plotters coordinate: linear in axis space, with key points (grid lines,
//! tick marks, labels) exactly at its ticks, each labelled as the tick says.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;

use super::data::Axis;

/// One axis of the drawing. Ticks come from the `ticks` module rather than plotters so log
/// axes get decades and labels keep their compact form (1k, 2.5M, 1e-300).
#[derive(Clone)]
pub(super) struct AxisCoord {
    axis: Axis,
    linear: RangedCoordf64,
}

impl AxisCoord {
    pub(super) fn new(axis: &Axis) -> Self {
        Self {
            axis: axis.clone(),
            linear: (axis.lo..axis.hi).into(),
        }
    }
}

impl Ranged for AxisCoord {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.linear.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Light points would be minor grid lines: none.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.axis.tick_positions()
        }
    }

    fn range(&self) -> Range<f64> {
        self.axis.lo..self.axis.hi
    }
}

impl ValueFormatter<f64> for AxisCoord {
    fn format_ext(&self, value: &f64) -> String {
        self.axis.label_at(*value)
    }
}
