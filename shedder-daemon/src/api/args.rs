//! How `shedder ctl` spells the request fields on its command line: the
//! value parsers of the request types' clap arguments. `none` (or the
//! field's own word for it) is JSON's `null`, which clears a field.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::{AdaptiveSpec, ModeName};
use crate::control::Tier;

/// A value, or `null` to clear the field. Not spelled `Option` so that
/// clap takes `Option<OrNull<T>>` as one optional value, not as a flag.
pub type OrNull<T> = Option<T>;

/// A number that is neither NaN nor infinite, which JSON cannot carry: a
/// time on the server's clock.
pub fn finite(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if value.is_finite() { Ok(value) } else { Err(format!("{text} is not a finite number")) }
}

/// A number that is neither NaN, infinite nor negative (JSON carries none
/// of the first two, and no field takes the last).
pub fn amount(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if value.is_nan() {
        Err("NaN is not a number".into())
    } else if value.is_infinite() {
        Err(format!("{text} is infinite"))
    } else if value < 0.0 {
        Err(format!("{text} is negative"))
    } else {
        Ok(value)
    }
}

/// A DSCP codepoint; the daemon checks its range with the rest of the config.
pub fn dscp(text: &str) -> Result<u8, String> {
    text.parse().map_err(|_| format!("{text:?} is not a codepoint (0..=63)"))
}

/// `parse`, or `none` for null.
pub fn or_none<T>(
    parse: impl Fn(&str) -> Result<T, String> + Clone,
) -> impl Fn(&str) -> Result<OrNull<T>, String> + Clone {
    move |text| if text == "none" { Ok(None) } else { parse(text).map(Some) }
}

/// One word as the config spells it (`drop`, `observe`).
pub fn json_word<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_value(Value::String(text.into())).map_err(|e| format!("{text:?}: {e}"))
}

/// A JSON value; a value of the wrong shape is named by its path
/// (`rules[0].dst_port: ...`). Read straight from the text, not through a
/// `Value`, which would keep only the last of a key given twice.
pub fn json<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut reader).map_err(|e| match e.inner().classify() {
        serde_json::error::Category::Data => e.to_string(),
        _ => format!("not valid JSON: {}", e.inner()),
    })?;
    reader.end().map_err(|e| format!("not valid JSON: {e}"))?;
    Ok(value)
}

/// A class's mode; `inherit` follows the global mode.
pub fn class_mode(text: &str) -> Result<OrNull<ModeName>, String> {
    match text {
        "inherit" => Ok(None),
        _ => json_word(text).map(Some).map_err(|_| format!("{text:?}: off, observe, enforce or inherit")),
    }
}

/// A class's tier; `default` goes back to the default tier.
pub fn tier(text: &str) -> Result<OrNull<Tier>, String> {
    match text {
        "default" => Ok(None),
        _ => json_word(text).map(Some).map_err(|_| format!("{text:?}: critical, standard, sheddable or default")),
    }
}

/// `MIN:MAX` as the adaptive budget's bounds, `none` as null.
pub fn adaptive(text: &str) -> Result<OrNull<AdaptiveSpec>, String> {
    if text == "none" {
        return Ok(None);
    }
    let (min, max) = text.split_once(':').ok_or_else(|| format!("{text:?}: MIN:MAX (jobs/s) or none"))?;
    Ok(Some(AdaptiveSpec { min_rate: amount(min)?, max_rate: amount(max)? }))
}

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

    use super::*;
    use crate::config::RuleSpec;

    #[test]
    fn a_json_argument_names_the_field_and_keeps_what_was_typed() {
        let bad_port = json::<Vec<RuleSpec>>(r#"[{"class": "a", "dst_port": "http"}]"#).unwrap_err();
        assert!(bad_port.starts_with("[0].dst_port: invalid type"), "{bad_port}");
        let twice = json::<Vec<RuleSpec>>(r#"[{"class": "a", "class": "b"}]"#).unwrap_err();
        assert!(twice.contains("duplicate field `class`"), "{twice}");
        for broken in ["[{", "[] []", ""] {
            let error = json::<Vec<RuleSpec>>(broken).unwrap_err();
            assert!(error.starts_with("not valid JSON: "), "{broken:?}: {error}");
        }
        // `shedder ctl raw` sends the line as typed, a key given twice included.
        let raw = json::<Box<RawValue>>(r#"{"op": "version", "op": "status"}"#).unwrap();
        assert_eq!(raw.get(), r#"{"op": "version", "op": "status"}"#);
    }
}
