//! What every section's validation shares: the error that names the field
//! at fault, and the checks of names and of token amounts.

use std::fmt;

/// Largest rate, burst or cost accepted, in tokens: far beyond any NIC, far below overflow.
const MAX_TOKENS: f64 = 1e12;
/// Longest class or tenant name, bytes.
const MAX_NAME_BYTES: usize = 128;

/// A validation failure, naming the field (`class[2].burst`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A name that is not empty, prints on one line, and is not already one of
/// `names` (of `kind`s).
pub(crate) fn check_new_name(
    name: &str,
    names: &[String],
    kind: &str,
    field: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if name.trim().is_empty() {
        return fail(field("name"), "must not be empty");
    }
    // A name is printed in log lines, tables and labels, and typed back in
    // commands: nothing there may split a line or hide in white space.
    if name.trim() != name {
        return fail(field("name"), format!("{name:?} begins or ends with white space"));
    }
    if name.chars().any(char::is_control) {
        return fail(field("name"), format!("{name:?} holds a control character"));
    }
    if name.len() > MAX_NAME_BYTES {
        return fail(field("name"), format!("is {} bytes long; at most {MAX_NAME_BYTES}", name.len()));
    }
    match names.iter().position(|n| n == name) {
        Some(j) => fail(field("name"), format!("\"{name}\" is already the name of {kind}[{j}]")),
        None => Ok(()),
    }
}

pub(crate) fn fail<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError { field: field.into(), message: message.into() })
}

pub(crate) fn milli(value: f64, field: &str, allow_zero: bool) -> Result<u64, ConfigError> {
    if value.is_nan() {
        return fail(field, "NaN is not a number");
    }
    if value < 0.0 {
        return fail(field, format!("{value} is negative"));
    }
    if value > MAX_TOKENS {
        return fail(field, format!("{value:e} is over the most accepted, {MAX_TOKENS:e}"));
    }
    let scaled = shedder_common::bucket::milli_tokens(value);
    if scaled == 0 && !(allow_zero && value == 0.0) {
        return fail(field, format!("{value} is below the resolution of 0.001 tokens"));
    }
    Ok(scaled)
}
