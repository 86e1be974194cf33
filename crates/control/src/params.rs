//! Parameters of a law, settable by name from text (`sluice perf --cc-param NAME=VALUE`,
//! scenario files). Every law's parameters default to its paper's values.

/// A parameter could not be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// The law has no parameter of that name.
    #[error("unknown parameter `{name}` (known: {known})")]
    Unknown {
        /// The name given.
        name: String,
        /// The law's parameter names, comma-separated.
        known: String,
    },
    /// The value does not parse or is out of range.
    #[error("parameter `{name}`: `{value}` is not {expected}")]
    Invalid {
        /// The parameter's name.
        name: String,
        /// The value given.
        value: String,
        /// What the value must be.
        expected: &'static str,
    },
}

/// One parameter: its name, and what it means (unit and default included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    /// The name `--cc-param` and scenario files use.
    pub name: &'static str,
    /// What it means, with its unit and default.
    pub help: &'static str,
}

/// The parameters of one law.
pub trait Params: Default + Clone + std::fmt::Debug {
    /// Every parameter, in the order to show them.
    const INFO: &'static [ParamInfo];

    /// Sets parameter `name` from `value`.
    fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError>;
}

/// The error for a name no law knows.
pub fn unknown<P: Params>(name: &str) -> ParamError {
    ParamError::Unknown {
        name: name.to_string(),
        known: P::INFO
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn invalid(name: &str, value: &str, expected: &'static str) -> ParamError {
    ParamError::Invalid {
        name: name.to_string(),
        value: value.to_string(),
        expected,
    }
}

const OUT_OF_RANGE: &str = "within the parameter's range (see its help)";

/// Parses a non-negative finite number.
pub fn parse_f64(name: &str, value: &str) -> Result<f64, ParamError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| invalid(name, value, "a non-negative number"))
}

/// Parses a number greater than zero (a period, a rate floor, something divided by).
pub fn parse_positive(name: &str, value: &str) -> Result<f64, ParamError> {
    Some(parse_f64(name, value)?)
        .filter(|&v| v > 0.0)
        .ok_or_else(|| invalid(name, value, "a positive number"))
}

/// Parses a number that must lie in `lo..=hi`.
pub fn parse_f64_in(name: &str, value: &str, lo: f64, hi: f64) -> Result<f64, ParamError> {
    Some(parse_f64(name, value)?)
        .filter(|v| (lo..=hi).contains(v))
        .ok_or_else(|| invalid(name, value, OUT_OF_RANGE))
}

/// Parses a non-negative integer.
pub fn parse_u64(name: &str, value: &str) -> Result<u64, ParamError> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| invalid(name, value, "a non-negative integer"))
}

/// Parses an integer that must lie in `lo..=hi`.
pub fn parse_u64_in(name: &str, value: &str, lo: u64, hi: u64) -> Result<u64, ParamError> {
    Some(parse_u64(name, value)?)
        .filter(|v| (lo..=hi).contains(v))
        .ok_or_else(|| invalid(name, value, OUT_OF_RANGE))
}

/// Parses a non-negative integer below 2^32 (a count).
pub fn parse_u32(name: &str, value: &str) -> Result<u32, ParamError> {
    u32::try_from(parse_u64(name, value)?)
        .map_err(|_| invalid(name, value, "an integer below 2^32"))
}

/// Microseconds (a parameter's unit) to the nanoseconds laws count in, rounded.
pub fn us_to_ns(us: f64) -> u64 {
    (us * 1e3).round() as u64
}

/// Mbit/s (a parameter's unit) to bit/s, rounded.
pub fn mbps_to_bps(mbps: f64) -> u64 {
    (mbps * 1e6).round() as u64
}
